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
//! Cost: the index is ordered by deadline, so a tick pops only what is
//! due; a renewal moves one entry. `examined` counts the entries ticks
//! looked at, which is what the bench and a test measure.

use std::collections::{BTreeSet, HashMap};
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
    signs: Signs,
    /// Its key in the index, when it is in it.
    due: Option<Micros>,
    /// A transition was asked for at this time and not yet seen committed.
    asked: Option<Micros>,
}

impl Entry {
    fn last_seen(&self) -> Micros {
        if self.lease.state.is_held() {
            self.signs.renewed.max(self.lease.last_seen)
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
    fn reindex(&mut self, id: &str) {
        let Some(e) = self.entries.get_mut(id) else {
            return;
        };
        let due = if e.lease.holder != self.config.holder {
            // Renewed elsewhere: another replica's to decide. (Adopting the
            // leases of a replica that died is not built yet.)
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
        if let Some(e) = self.entries.remove(id)
            && let Some(d) = e.due
        {
            self.index.remove(&(d, id.to_owned()));
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
            t.entries.insert(
                id.clone(),
                Entry {
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
        if wrote {
            e.signs.changed = now;
        }
        let lease = Lease {
            last_seen: now,
            ..e.lease.clone()
        };
        let lift = wrote && lease.revive(true).is_some() && lease.holder == t.config.holder;
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
                    last_seen: e.signs.renewed.max(e.lease.last_seen),
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
            let entry = t.entries.entry(id.clone()).or_insert_with(|| Entry {
                lease: lease.clone(),
                revision: s.revision,
                agent_id: s.agent_id.clone(),
                ancestors: e.ancestors.clone(),
                signs: Signs {
                    renewed: lease.last_seen,
                    changed: time,
                },
                due: None,
                asked: None,
            });
            if entry.lease.state != lease.state && lease.state == Liveness::Active {
                // Taken or taken back: a fresh start for both clocks.
                entry.signs.renewed = entry.signs.renewed.max(lease.last_seen);
                entry.signs.changed = entry.signs.changed.max(time);
            }
            entry.lease = lease;
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
                if entry.lease.state == Liveness::Idle && entry.lease.holder == t.config.holder {
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
