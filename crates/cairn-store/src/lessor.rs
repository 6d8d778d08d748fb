//! The leases a server follows: the last signs of life of each leased
//! session, and a deadline index that says which are due.
//!
//! Renewals live here only, in memory: a keep-alive costs a hash lookup
//! and an index move, never a write. What the store holds is the state
//! (`cairn_core::liveness`), and each change of it is a command with its
//! revision, decided by the liveness driver from [`Lessor::due`]. The
//! table follows committed revisions ([`Lessor::observe`], called by the
//! hub), so it learns of leases taken through another server too.
//!
//! A server that starts arms every held lease with a full TTL from its
//! start ([`Lessor::load`]): the time it was down is nobody's fault, as
//! etcd re-arms its leases after a leader change.
//!
//! Each lease names its holder, the replica its agent renews on; only that
//! replica sees the renewals, so only it runs the lease's timers. When a
//! holder is no longer among the live replicas ([`Lessor::follow_replicas`])
//! every survivor adopts its leases, each armed with a full TTL from then;
//! the transitions they then decide apply at one session revision, so one
//! of them writes each.
//!
//! Cost: the index is ordered by deadline, so a tick pops only what is
//! due; a renewal moves one entry. `examined` counts the entries ticks
//! looked at, which is what the bench and a test measure.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use cairn_core::Micros;
use cairn_core::access::{self, Action, Caller, SessionFacts};
use cairn_core::error::Result;
use cairn_core::liveness::{Lease, Liveness, Signs};
use cairn_core::session::Session;

use crate::records::{Event, EventKind, EventObject, Revision};

/// How long a transition the driver asked for may stay unconfirmed before
/// it looks again (a write that failed, or lost to another server).
const RETRY_MICROS: Micros = 1_000_000;

/// What the lessor knows of one leased session.
#[derive(Debug, Clone)]
struct Entry {
    lease: Lease,
    /// The session's revision: a transition applies only at it.
    revision: u64,
    agent_id: String,
    ancestors: Vec<String>,
    /// The clocks the timers run from: a restart or an adoption re-arms
    /// them without the agent having shown any sign.
    signs: Signs,
    /// The last sign of life this server knows of (a renewal here, or the
    /// one the stored lease carries).
    seen: Micros,
    /// Its key in the index, when it is in it.
    due: Option<Micros>,
    /// A transition was asked for at this time and not yet seen committed.
    asked: Option<Micros>,
}

impl Entry {
    fn last_seen(&self) -> Micros {
        if self.lease.state.is_held() {
            self.seen.max(self.lease.last_seen)
        } else {
            self.lease.last_seen
        }
    }
}

/// A transition the driver should write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub session_id: String,
    pub to: Liveness,
    pub expected_revision: u64,
    pub last_seen: Micros,
}

/// What a renewal found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed in memory; the lease as stored.
    Renewed(Lease),
    /// The stored lease must change (none yet, other timings, another
    /// holder, or an agent back from stalled, lost or finished): a write.
    Write,
}

#[derive(Default)]
struct Table {
    /// The timings, and this server's name: it runs the timers of the
    /// leases it holds only, because only it sees their renewals.
    config: LeaseConfig,
    entries: HashMap<String, Entry>,
    index: BTreeSet<(Micros, String)>,
    /// Sessions whose signs of life call for a transition up (a write
    /// while idle, stalled or lost), found outside a tick.
    lifted: BTreeSet<String>,
    /// How many followed leases each holder other than this server holds.
    holders: HashMap<String, usize>,
    /// Holders no longer among the live replicas: their leases' timers run
    /// here too.
    adopted: HashSet<String>,
    examined: u64,
}

/// Timings the server was started with.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// TTL of a lease whose keep-alive names none.
    pub ttl_ms: u64,
    /// Grace of a lease whose keep-alive names none.
    pub grace_ms: u64,
    /// No write of the plan for this long makes a renewing agent idle.
    pub idle_after_ms: u64,
    /// This server's name in `Lease::holder` (empty for a lone server).
    pub holder: String,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            ttl_ms: 60_000,
            grace_ms: 30_000,
            idle_after_ms: 300_000,
            holder: String::new(),
        }
    }
}

/// The leases of one server.
pub struct Lessor {
    table: Mutex<Table>,
    /// Monotonic time, in server micros: a wall clock stepped by NTP must
    /// not stall every agent at once.
    origin: (Instant, Micros),
    /// Wakes the driver when something is due sooner than it planned.
    pub(crate) wake: tokio::sync::Notify,
}

impl std::fmt::Debug for Lessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lessor")
            .field("leases", &self.lock().entries.len())
            .finish_non_exhaustive()
    }
}

impl Default for Lessor {
    fn default() -> Self {
        Lessor {
            table: Mutex::new(Table::default()),
            origin: (Instant::now(), crate::now_micros()),
            wake: tokio::sync::Notify::new(),
        }
    }
}

impl Table {
    /// Whether this server runs the timers of leases held by `holder`.
    fn mine(&self, holder: &str) -> bool {
        holder == self.config.holder || self.adopted.contains(holder)
    }

    /// Follows `lease` for `id` (new, or replacing what was followed),
    /// keeping the count of leases by holder.
    fn hold(&mut self, id: &str, lease: &Lease) {
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        let old = std::mem::replace(&mut e.lease, lease.clone());
        if old.holder != lease.holder {
            self.uncount(&old.holder);
            self.count(&lease.holder);
        }
    }

    fn count(&mut self, holder: &str) {
        if holder != self.config.holder {
            *self.holders.entry(holder.to_owned()).or_default() += 1;
        }
    }

    fn uncount(&mut self, holder: &str) {
        if let Some(n) = self.holders.get_mut(holder) {
            *n -= 1;
            if *n == 0 {
                self.holders.remove(holder);
                self.adopted.remove(holder);
            }
        }
    }

    fn insert(&mut self, id: String, entry: Entry) {
        self.count(&entry.lease.holder);
        if let Some(old) = self.entries.insert(id, entry) {
            self.uncount(&old.lease.holder);
        }
    }

    fn reindex(&mut self, id: &str) {
        let Some(e) = self.entries.get(id) else {
            return;
        };
        let mine = self.mine(&e.lease.holder);
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        let due = if !mine {
            // Renewed on a live replica: that replica decides.
            None
        } else if e.asked.is_some() {
            e.asked.map(|t| t + RETRY_MICROS)
        } else {
            e.lease.next_due(e.signs, self.config.idle_after_ms)
        };
        if e.due == due {
            return;
        }
        if let Some(old) = e.due.take() {
            self.index.remove(&(old, id.to_owned()));
        }
        if let Some(d) = due {
            self.index.insert((d, id.to_owned()));
        }
        e.due = due;
    }

    fn remove(&mut self, id: &str) {
        if let Some(e) = self.entries.remove(id) {
            if let Some(d) = e.due {
                self.index.remove(&(d, id.to_owned()));
            }
            self.uncount(&e.lease.holder);
        }
        self.lifted.remove(id);
    }
}

impl Lessor {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The timings in force.
    pub fn config(&self) -> LeaseConfig {
        self.lock().config.clone()
    }

    /// The TTL and grace of a lease whose keep-alive names none.
    pub fn defaults(&self) -> (u64, u64) {
        let t = self.lock();
        (t.config.ttl_ms, t.config.grace_ms)
    }

    /// Sets the timings (at start, before any lease is followed).
    pub fn configure(&self, config: LeaseConfig) {
        self.lock().config = config;
    }

    /// Now, in server micros, from a monotonic clock.
    pub fn now(&self) -> Micros {
        let elapsed = Micros::try_from(self.origin.0.elapsed().as_micros()).unwrap_or(Micros::MAX);
        self.origin.1.saturating_add(elapsed)
    }

    /// Entries the ticks have looked at since the start.
    pub fn examined(&self) -> u64 {
        self.lock().examined
    }

    /// How many leases are followed.
    pub fn followed(&self) -> usize {
        self.lock().entries.len()
    }

    /// Follows the leased sessions read at start, every held lease armed
    /// with a full TTL from `now`.
    pub fn load(&self, sessions: impl IntoIterator<Item = (Session, Vec<String>)>, now: Micros) {
        let mut t = self.lock();
        for (s, ancestors) in sessions {
            let Some(lease) = s.lease.clone() else {
                continue;
            };
            let id = s.session_id.clone();
            // A lease observed since the snapshot was read is newer.
            if t.entries.contains_key(&id) {
                continue;
            }
            t.insert(
                id.clone(),
                Entry {
                    seen: lease.last_seen,
                    lease,
                    revision: s.revision,
                    agent_id: s.agent_id,
                    ancestors,
                    signs: Signs {
                        renewed: now,
                        changed: now,
                    },
                    due: None,
                    asked: None,
                },
            );
            t.reindex(&id);
        }
        drop(t);
        self.wake.notify_one();
    }

    /// Follows committed revisions (called by the hub, in order, before
    /// watchers see them).
    pub fn observe(&self, revisions: &[std::sync::Arc<Revision>]) {
        let mut t = self.lock();
        let mut woke = false;
        for rev in revisions {
            for e in &rev.events {
                woke |= observe_event(&mut t, e, rev.time);
            }
        }
        drop(t);
        if woke {
            self.wake.notify_one();
        }
    }

    /// A sign of life from `caller` for `id`: a keep-alive (`wrote` false)
    /// or a plan write of its own. Renews in memory when the stored lease
    /// stays as it is, and answers it with this renewal as its last sign of
    /// life; a write that ends idleness or a stall is left to the driver.
    /// A keep-alive is checked against the caller's rights here, from the
    /// facts the table holds.
    pub fn renew(
        &self,
        caller: &Caller,
        id: &str,
        wrote: bool,
        ttl: Option<(u64, u64)>,
    ) -> Result<Renewal> {
        let now = self.now();
        let mut guard = self.lock();
        let t = &mut *guard;
        let Some(e) = t.entries.get_mut(id) else {
            return Ok(Renewal::Write);
        };
        if !wrote {
            access::check_session(
                caller,
                Action::WritePlan,
                &SessionFacts {
                    session_id: id,
                    agent_id: &e.agent_id,
                    ancestors: &e.ancestors,
                },
            )?;
        }
        let (ttl_ms, grace_ms) = ttl.unwrap_or((e.lease.ttl_ms, e.lease.grace_ms));
        if !wrote
            && e.lease
                .keep_alive_writes(ttl_ms, grace_ms, &t.config.holder)
        {
            return Ok(Renewal::Write);
        }
        if wrote && e.lease.state == Liveness::Finished {
            return Ok(Renewal::Renewed(e.lease.clone()));
        }
        e.signs.renewed = now;
        e.seen = now;
        if wrote {
            e.signs.changed = now;
        }
        let lease = Lease {
            last_seen: now,
            ..e.lease.clone()
        };
        let lift = wrote && lease.revive(true).is_some() && t.mine(&lease.holder);
        if lift {
            t.lifted.insert(id.to_owned());
        }
        t.reindex(id);
        drop(guard);
        if lift {
            self.wake.notify_one();
        }
        Ok(Renewal::Renewed(lease))
    }

    /// The last sign of life this server saw of `id`, if it follows it.
    pub fn last_seen(&self, id: &str) -> Option<Micros> {
        self.lock().entries.get(id).map(Entry::last_seen)
    }

    /// The lease of `id` as stored, with the last sign of life this server
    /// saw, if it follows it.
    pub fn lease(&self, id: &str) -> Option<Lease> {
        self.lock().entries.get(id).map(|e| Lease {
            last_seen: e.last_seen(),
            ..e.lease.clone()
        })
    }

    /// The transitions due at `now`: pops what the index says is due and
    /// what a renewal lifted. Each is asked for once; it is asked again
    /// after [`RETRY_MICROS`] if its commit has not been seen by then.
    pub fn due(&self, now: Micros) -> Vec<Transition> {
        let mut guard = self.lock();
        let t = &mut *guard;
        let idle = t.config.idle_after_ms;
        let mut out = Vec::new();
        let mut look = std::mem::take(&mut t.lifted)
            .into_iter()
            .collect::<Vec<_>>();
        while let Some(first) = t.index.first() {
            if first.0 > now {
                break;
            }
            let Some((_, id)) = t.index.pop_first() else {
                break;
            };
            if let Some(e) = t.entries.get_mut(&id) {
                e.due = None;
                e.asked = None;
            }
            look.push(id);
        }
        t.examined += look.len() as u64;
        for id in look {
            let Some(e) = t.entries.get_mut(&id) else {
                continue;
            };
            let decayed = e.lease.decay(e.signs, idle, now);
            let to = if decayed != e.lease.state {
                Some(decayed)
            } else if e.signs.changed > e.lease.since && e.lease.revive(true).is_some() {
                Some(Liveness::Active)
            } else {
                None
            };
            if let Some(to) = to {
                e.asked = Some(now);
                out.push(Transition {
                    session_id: id.clone(),
                    to,
                    expected_revision: e.revision,
                    last_seen: e.seen.max(e.lease.last_seen),
                });
            }
            t.reindex(&id);
        }
        out
    }

    /// When the next entry is due, if any.
    pub fn next_due(&self) -> Option<Micros> {
        let t = self.lock();
        if !t.lifted.is_empty() {
            return Some(Micros::MIN);
        }
        t.index.first().map(|(d, _)| *d)
    }

    /// The holders of followed leases other than this server: read before
    /// asking the store which replicas are alive, so that every holder
    /// named here had announced itself before the answer was read.
    pub fn holders(&self) -> BTreeSet<String> {
        self.lock().holders.keys().cloned().collect()
    }

    /// Takes over the timers of the leases whose holder, among `known`
    /// (from [`Lessor::holders`]), is not in `alive`, each armed with a
    /// full TTL from `now`; gives them back to a holder seen alive again.
    /// Returns the holders adopted by this call.
    pub fn follow_replicas(
        &self,
        known: &BTreeSet<String>,
        alive: &BTreeSet<String>,
        now: Micros,
    ) -> Vec<String> {
        let mut guard = self.lock();
        let t = &mut *guard;
        let mut adopted = Vec::new();
        let mut moved = HashSet::new();
        for h in known {
            let dead = !alive.contains(h);
            if !t.holders.contains_key(h) || dead == t.adopted.contains(h) {
                continue;
            }
            if dead {
                t.adopted.insert(h.clone());
                adopted.push(h.clone());
            } else {
                t.adopted.remove(h);
            }
            moved.insert(h.clone());
        }
        if moved.is_empty() {
            return adopted;
        }
        // Rare (a replica dies or comes back): one pass over the leases.
        let ids: Vec<String> = t
            .entries
            .iter_mut()
            .filter(|(_, e)| moved.contains(&e.lease.holder))
            .map(|(id, e)| {
                e.signs.renewed = e.signs.renewed.max(now);
                e.signs.changed = e.signs.changed.max(now);
                e.asked = None;
                id.clone()
            })
            .collect();
        for id in &ids {
            t.reindex(id);
        }
        drop(guard);
        self.wake.notify_one();
        adopted
    }
}

/// Applies one committed event to the table; whether the driver should
/// look sooner than it planned.
fn observe_event(t: &mut Table, e: &Event, time: Micros) -> bool {
    match (&e.kind, &e.object) {
        (EventKind::SessionDeleted, _) => {
            t.remove(&e.session_id);
            false
        }
        (EventKind::SessionCreated | EventKind::SessionUpdated, EventObject::Session(s)) => {
            if e.moved {
                // The sessions below a moved one moved with it; their
                // ancestry is what rights are checked against.
                for entry in t.entries.values_mut() {
                    if let Some(i) = entry.ancestors.iter().position(|a| *a == s.session_id) {
                        let mut chain = e.ancestors.clone();
                        chain.extend(entry.ancestors.drain(i..));
                        entry.ancestors = chain;
                    }
                }
            }
            // A lease is never taken away: a session without one has no
            // entry.
            let Some(lease) = s.lease.clone() else {
                return false;
            };
            let id = s.session_id.clone();
            if !t.entries.contains_key(&id) {
                t.insert(
                    id.clone(),
                    Entry {
                        lease: lease.clone(),
                        revision: s.revision,
                        agent_id: s.agent_id.clone(),
                        ancestors: e.ancestors.clone(),
                        signs: Signs {
                            renewed: lease.last_seen,
                            changed: time,
                        },
                        seen: lease.last_seen,
                        due: None,
                        asked: None,
                    },
                );
            }
            let was = t.entries.get(&id).map(|e| e.lease.state);
            if was.is_some_and(|w| w != lease.state) {
                crate::telemetry::lease_transition(lease.state.as_str());
            }
            t.hold(&id, &lease);
            let Some(entry) = t.entries.get_mut(&id) else {
                return false;
            };
            // A stored sign of life (a lease taken, here or on another
            // replica) restarts the timers from it.
            entry.signs.renewed = entry.signs.renewed.max(lease.last_seen);
            if was != Some(lease.state) && lease.state == Liveness::Active {
                // Taken back: activity again.
                entry.signs.changed = entry.signs.changed.max(time);
            }
            entry.seen = entry.seen.max(lease.last_seen);
            entry.revision = s.revision;
            entry.agent_id.clone_from(&s.agent_id);
            entry.ancestors.clone_from(&e.ancestors);
            entry.asked = None;
            t.reindex(&id);
            true
        }
        (EventKind::PlanUpdated, _) => {
            // Any change of the plan is activity: it ends idleness.
            if let Some(entry) = t.entries.get_mut(&e.session_id) {
                entry.signs.changed = entry.signs.changed.max(time);
                let idle = entry.lease.state == Liveness::Idle;
                let holder = entry.lease.holder.clone();
                if idle && t.mine(&holder) {
                    t.lifted.insert(e.session_id.clone());
                    return true;
                }
                t.reindex(&e.session_id);
            }
            false
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    fn leased(id: &str, ttl_ms: u64, state: Liveness) -> (Session, Vec<String>) {
        (
            Session {
                session_id: id.into(),
                revision: 7,
                lease: Some(Lease {
                    ttl_ms,
                    grace_ms: 5_000,
                    state,
                    ..Lease::default()
                }),
                ..Session::default()
            },
            Vec::new(),
        )
    }

    /// Commits `transitions` as the store would, through `observe`.
    fn settle(l: &Lessor, transitions: &[Transition], now: Micros) {
        let events = transitions
            .iter()
            .map(|tr| {
                let e = l.lock().entries.get(&tr.session_id).cloned();
                let e = e.expect("followed");
                let s = Session {
                    session_id: tr.session_id.clone(),
                    revision: tr.expected_revision + 1,
                    lease: Some(Lease {
                        state: tr.to,
                        since: now,
                        last_seen: tr.last_seen,
                        ..e.lease
                    }),
                    ..Session::default()
                };
                Event::session(EventKind::SessionUpdated, &s, Vec::new())
            })
            .collect();
        l.observe(&[std::sync::Arc::new(Revision {
            revision: 1,
            time: now,
            events,
        })]);
    }

    fn lessor() -> Lessor {
        let l = Lessor::default();
        l.configure(LeaseConfig {
            idle_after_ms: 3_600_000,
            ..LeaseConfig::default()
        });
        l
    }

    #[test]
    fn a_restart_arms_every_lease_with_a_full_ttl() {
        let l = lessor();
        // Stalled before the restart: lost only after TTL + grace from it.
        l.load(
            [
                leased("a", 10_000, Liveness::Active),
                leased("b", 10_000, Liveness::Stalled),
            ],
            100 * S,
        );
        assert!(l.due(109 * S).is_empty());
        let due = l.due(110 * S);
        assert_eq!(due.len(), 1);
        assert_eq!(
            (due[0].session_id.as_str(), due[0].to),
            ("a", Liveness::Stalled)
        );
        settle(&l, &due, 110 * S);
        let due = l.due(115 * S);
        let got: Vec<_> = due.iter().map(|t| (t.session_id.as_str(), t.to)).collect();
        assert_eq!(got, [("a", Liveness::Lost), ("b", Liveness::Lost)]);
    }

    #[test]
    fn a_server_runs_the_timers_of_the_leases_it_holds_only() {
        let l = lessor();
        let (mut mine, a) = leased("mine", 10_000, Liveness::Active);
        let (mut theirs, b) = leased("theirs", 10_000, Liveness::Active);
        for (s, holder) in [(&mut mine, "me"), (&mut theirs, "other")] {
            if let Some(lease) = &mut s.lease {
                lease.holder = holder.into();
            }
        }
        l.configure(LeaseConfig {
            holder: "me".into(),
            idle_after_ms: 3_600_000,
            ..LeaseConfig::default()
        });
        l.load([(mine, a), (theirs, b)], 0);
        let due = l.due(100 * S);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].session_id, "mine");
    }

    #[test]
    fn survivors_adopt_the_leases_of_a_dead_replica_with_a_full_ttl() {
        let l = lessor();
        l.configure(LeaseConfig {
            holder: "me".into(),
            idle_after_ms: 3_600_000,
            ..LeaseConfig::default()
        });
        let held = |id: &str, holder: &str| {
            let (mut s, a) = leased(id, 10_000, Liveness::Active);
            if let Some(lease) = &mut s.lease {
                lease.holder = holder.into();
                lease.last_seen = 3 * S;
            }
            (s, a)
        };
        l.load([held("x", "dead"), held("y", "live")], 0);
        let known = l.holders();
        assert_eq!(known, ["dead".to_owned(), "live".to_owned()].into());
        assert!(l.due(100 * S).is_empty());

        // A holder that took a lease after `known` was read is not judged
        // by an answer that may predate its announcement.
        l.load([held("z", "newcomer")], 0);
        let alive: BTreeSet<String> = ["live".to_owned()].into();
        assert_eq!(l.follow_replicas(&known, &alive, 100 * S), ["dead"]);
        assert_eq!(
            l.follow_replicas(&known, &alive, 101 * S),
            Vec::<String>::new()
        );
        // A full TTL from the adoption, then stalled; the last sign of
        // life is the agent's, not the adoption's.
        assert!(l.due(109 * S).is_empty());
        let due = l.due(110 * S);
        let got: Vec<_> = due
            .iter()
            .map(|t| (t.session_id.as_str(), t.to, t.last_seen))
            .collect();
        assert_eq!(got, [("x", Liveness::Stalled, 3 * S)]);

        // Seen alive again (it had only lost the store for a while): its
        // timers are its own again.
        let back: BTreeSet<String> = ["live".to_owned(), "dead".to_owned()].into();
        l.follow_replicas(&known, &back, 111 * S);
        assert!(l.due(200 * S).is_empty());
    }

    /// A session moved to another tree takes its leased descendants with
    /// it: a keep-alive for one of them is checked against the new tree.
    #[test]
    fn a_move_carries_the_leased_descendants_ancestry() {
        let l = lessor();
        let (mut leaf, _) = leased("leaf", 10_000, Liveness::Active);
        leaf.parent_session_id = Some("mid".into());
        l.load([(leaf, vec!["root".to_owned(), "mid".to_owned()])], l.now());
        let orchestrator = |root: &str| {
            Caller::Principal(access::Principal {
                principal_id: "o".into(),
                roles: [access::Role::Orchestrator].into(),
                session_roots: [root.to_owned()].into(),
                ..access::Principal::default()
            })
        };
        assert!(l.renew(&orchestrator("root"), "leaf", false, None).is_ok());
        // "mid" moves under "other".
        let mid = Session {
            session_id: "mid".into(),
            parent_session_id: Some("other".into()),
            ..Session::default()
        };
        let mut moved = Event::session(EventKind::SessionUpdated, &mid, vec!["other".into()]);
        moved.moved = true;
        l.observe(&[std::sync::Arc::new(Revision {
            revision: 2,
            time: l.now(),
            events: vec![moved],
        })]);
        assert!(l.renew(&orchestrator("root"), "leaf", false, None).is_err());
        assert!(l.renew(&orchestrator("other"), "leaf", false, None).is_ok());
    }

    #[test]
    fn a_transition_is_asked_for_once_until_it_is_seen_or_the_retry_is_due() {
        let l = lessor();
        l.load([leased("a", 10_000, Liveness::Active)], 0);
        assert_eq!(l.due(10 * S).len(), 1);
        assert!(l.due(10 * S + RETRY_MICROS - 1).is_empty());
        assert_eq!(l.due(10 * S + RETRY_MICROS).len(), 1);
    }

    #[test]
    fn keep_alives_need_the_write_right_and_renew_in_memory() {
        let l = lessor();
        l.load([leased("a", 10_000, Liveness::Active)], l.now());
        let viewer = Caller::Principal(access::Principal {
            principal_id: "v".into(),
            roles: [access::Role::Viewer].into(),
            ..access::Principal::default()
        });
        assert!(l.renew(&viewer, "a", false, None).is_err());
        assert!(matches!(
            l.renew(&Caller::Open, "a", false, None),
            Ok(Renewal::Renewed(_))
        ));
        // Other timings, or an unknown session, need a write.
        assert_eq!(
            l.renew(&Caller::Open, "a", false, Some((20_000, 5_000)))
                .ok(),
            Some(Renewal::Write)
        );
        assert_eq!(
            l.renew(&Caller::Open, "b", false, None).ok(),
            Some(Renewal::Write)
        );
    }

    /// 100,000 leases, 1% of them stop renewing: the ticks over two TTLs
    /// look at the expiring ones and the renewed ones' moved deadlines are
    /// never popped.
    #[test]
    fn expiry_work_is_proportional_to_the_expiring() {
        let l = lessor();
        let n = 100_000;
        l.load(
            (0..n).map(|i| leased(&format!("s{i}"), 10_000, Liveness::Active)),
            0,
        );
        let table = |f: &mut dyn FnMut(&mut Table)| f(&mut l.lock());
        // Every 1 s for 30 s, 99% renew (moved in the index, as a
        // keep-alive does); the ticks run between.
        let mut transitions = 0;
        for sec in 1..=30 {
            let now = sec * S;
            table(&mut |t| {
                for i in (0..n).filter(|i| i % 100 != 0) {
                    let id = format!("s{i}");
                    if let Some(e) = t.entries.get_mut(&id) {
                        e.signs.renewed = now;
                    }
                    t.reindex(&id);
                }
            });
            let due = l.due(now);
            settle(&l, &due, now);
            transitions += due.len();
        }
        // 1,000 stalled, then the same 1,000 lost.
        assert_eq!(transitions, 2_000);
        assert_eq!(l.examined(), 2_000);
    }
}
