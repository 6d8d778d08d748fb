//! Leases and liveness: whether the agent of a session is still there.
//!
//! A session may hold a [`Lease`]: a TTL its agent renews (a keep-alive, or
//! any plan write of its own). The stored [`Liveness`] moves down by time
//! alone and up only on a sign of life:
//!
//! ```text
//!            write                 no renewal for ttl       + grace
//!   IDLE ──────────────▶ ACTIVE ─────────────────▶ STALLED ─────────▶ LOST
//!     ▲  no write for idle_after │                   │  renewal or write  │
//!     └──────────────────────────┘                   └──────▶ ACTIVE ◀────┘
//!   release (the agent says it is done) ──▶ FINISHED ── keep-alive ──▶ ACTIVE
//! ```
//!
//! `IDLE` is the rule "the lease is renewed, but the agent has not written
//! its plan for `idle_after`": a keep-alive proves the process is there,
//! only a write proves it is working. Renewals are not stored (a server
//! that restarts re-arms every lease with a full TTL, as etcd does after a
//! leader change); each change of state is a write with its revision.
//! These are pure functions of the stored lease, the last signs of life
//! and the time: the store decides when to ask them.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::time::Micros;

/// Where a leased session's agent stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Renewing and writing.
    #[default]
    Active,
    /// Renewing, but no write of its plan for `idle_after`.
    Idle,
    /// No renewal for one TTL.
    Stalled,
    /// No renewal for a TTL and the grace after it.
    Lost,
    /// The agent said it is done and released its lease.
    Finished,
}

impl Liveness {
    /// The word boards and JSON show (`active`, `lost`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Liveness::Active => "active",
            Liveness::Idle => "idle",
            Liveness::Stalled => "stalled",
            Liveness::Lost => "lost",
            Liveness::Finished => "finished",
        }
    }

    /// Whether time can still change the state: a lease that is held.
    pub fn is_held(self) -> bool {
        matches!(self, Liveness::Active | Liveness::Idle | Liveness::Stalled)
    }

    /// How far down the ladder a state is; time only ever moves a lease
    /// to a deeper one.
    fn depth(self) -> u8 {
        match self {
            Liveness::Active => 0,
            Liveness::Idle => 1,
            Liveness::Stalled => 2,
            Liveness::Lost => 3,
            Liveness::Finished => 4,
        }
    }
}

/// A session's lease as stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Lease {
    /// Renew within this many milliseconds, or the session stalls.
    pub ttl_ms: u64,
    /// After a stall, this many more milliseconds without renewal and the
    /// session is lost.
    pub grace_ms: u64,
    pub state: Liveness,
    /// When the state was entered.
    pub since: Micros,
    /// The last sign of life the store knew of when it wrote this state.
    pub last_seen: Micros,
    /// The server (replica) the agent renews with: only it sees the
    /// renewals, so only it, or a survivor once it is gone, runs the
    /// timers.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub holder: String,
}

/// The last signs of life a server has seen of a session (in memory: they
/// are not stored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signs {
    /// The last renewal: a keep-alive or a write.
    pub renewed: Micros,
    /// The last write of the session's plan by its agent.
    pub changed: Micros,
}

/// Bounds on what a caller may ask of a lease.
pub const MIN_TTL_MS: u64 = 1_000;
pub const MAX_TTL_MS: u64 = 3_600_000;
pub const MAX_GRACE_MS: u64 = 3_600_000;

/// Checks a requested TTL and grace.
pub fn validate(ttl_ms: u64, grace_ms: u64) -> Result<()> {
    if !(MIN_TTL_MS..=MAX_TTL_MS).contains(&ttl_ms) {
        return Err(Error::invalid(
            "ttl",
            format!("a lease TTL must be between 1s and 1h, got {ttl_ms}ms"),
        ));
    }
    if grace_ms > MAX_GRACE_MS {
        return Err(Error::invalid(
            "grace",
            format!("a lease grace must be at most 1h, got {grace_ms}ms"),
        ));
    }
    Ok(())
}

fn ms(v: u64) -> Micros {
    Micros::try_from(v.saturating_mul(1000)).unwrap_or(Micros::MAX)
}

impl Lease {
    /// A lease held from `now`.
    pub fn held(ttl_ms: u64, grace_ms: u64, holder: &str, now: Micros) -> Self {
        Lease {
            ttl_ms,
            grace_ms,
            state: Liveness::Active,
            since: now,
            last_seen: now,
            holder: holder.to_owned(),
        }
    }

    /// The state time alone gives at `now`, from the last signs of life:
    /// never shallower than the stored one (only a sign of life moves a
    /// lease up, see [`Lease::revive`]).
    pub fn decay(&self, signs: Signs, idle_after_ms: u64, now: Micros) -> Liveness {
        if !self.state.is_held() {
            return self.state;
        }
        let stall = signs.renewed.saturating_add(ms(self.ttl_ms));
        let timed = if now >= stall.saturating_add(ms(self.grace_ms)) {
            Liveness::Lost
        } else if now >= stall {
            Liveness::Stalled
        } else if now >= signs.changed.saturating_add(ms(idle_after_ms)) {
            Liveness::Idle
        } else {
            Liveness::Active
        };
        if timed.depth() > self.state.depth() {
            timed
        } else {
            self.state
        }
    }

    /// When [`Lease::decay`] next gives a deeper state, if ever.
    pub fn next_due(&self, signs: Signs, idle_after_ms: u64) -> Option<Micros> {
        let stall = signs.renewed.saturating_add(ms(self.ttl_ms));
        let lost = stall.saturating_add(ms(self.grace_ms));
        match self.state {
            Liveness::Active => Some(stall.min(signs.changed.saturating_add(ms(idle_after_ms)))),
            Liveness::Idle => Some(stall),
            Liveness::Stalled => Some(lost),
            Liveness::Lost | Liveness::Finished => None,
        }
    }

    /// Whether a keep-alive asking for these timings at `holder` must
    /// write: the stored lease is renewed in memory only while it is held
    /// (active or idle) as asked, where it is held.
    pub fn keep_alive_writes(&self, ttl_ms: u64, grace_ms: u64, holder: &str) -> bool {
        self.revive(false).is_some()
            || self.ttl_ms != ttl_ms
            || self.grace_ms != grace_ms
            || self.holder != holder
    }

    /// The state a sign of life moves the lease to, if it moves: a
    /// keep-alive (`wrote` false) brings back a stalled or lost agent, or
    /// one that had finished and holds a lease again; a write of its plan
    /// also ends idleness. A finished agent's writes do not re-take the
    /// lease: only a keep-alive does.
    pub fn revive(&self, wrote: bool) -> Option<Liveness> {
        match (self.state, wrote) {
            (Liveness::Active, _) | (Liveness::Idle, false) | (Liveness::Finished, true) => None,
            (Liveness::Idle | Liveness::Stalled | Liveness::Lost, _)
            | (Liveness::Finished, false) => Some(Liveness::Active),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const S: Micros = 1_000_000;

    fn lease(state: Liveness) -> Lease {
        Lease {
            ttl_ms: 10_000,
            grace_ms: 5_000,
            state,
            ..Lease::default()
        }
    }

    fn signs(renewed: Micros, changed: Micros) -> Signs {
        Signs { renewed, changed }
    }

    #[test]
    fn a_lease_stalls_after_one_ttl_and_is_lost_after_the_grace() {
        let l = lease(Liveness::Active);
        let at = |t| l.decay(signs(0, 0), 60_000, t * S);
        assert_eq!(at(9), Liveness::Active);
        assert_eq!(at(10), Liveness::Stalled);
        assert_eq!(at(14), Liveness::Stalled);
        assert_eq!(at(15), Liveness::Lost);
        assert_eq!(l.next_due(signs(0, 0), 60_000), Some(10 * S));
        assert_eq!(
            lease(Liveness::Stalled).next_due(signs(0, 0), 60_000),
            Some(15 * S)
        );
    }

    #[test]
    fn renewals_without_writes_make_an_agent_idle_not_stalled() {
        let l = lease(Liveness::Active);
        // Renewed at 100 s, last wrote at 0, idle after 60 s.
        assert_eq!(l.decay(signs(100 * S, 0), 60_000, 101 * S), Liveness::Idle);
        assert_eq!(l.next_due(signs(100 * S, 0), 60_000), Some(60 * S));
        // A keep-alive does not end idleness; a write does.
        assert_eq!(lease(Liveness::Idle).revive(false), None);
        assert_eq!(lease(Liveness::Idle).revive(true), Some(Liveness::Active));
        // So a keep-alive of an idle lease held as asked writes nothing.
        assert!(!lease(Liveness::Idle).keep_alive_writes(10_000, 5_000, ""));
        assert!(lease(Liveness::Idle).keep_alive_writes(10_000, 5_000, "elsewhere"));
        assert!(lease(Liveness::Stalled).keep_alive_writes(10_000, 5_000, ""));
    }

    #[test]
    fn the_lost_and_the_finished_stay_until_a_sign_of_life() {
        for state in [Liveness::Lost, Liveness::Finished] {
            let l = lease(state);
            assert_eq!(l.decay(signs(0, 0), 1, Micros::MAX), state);
            assert_eq!(l.next_due(signs(0, 0), 1), None);
        }
        assert_eq!(lease(Liveness::Lost).revive(false), Some(Liveness::Active));
        assert_eq!(lease(Liveness::Finished).revive(true), None);
        assert_eq!(
            lease(Liveness::Finished).revive(false),
            Some(Liveness::Active)
        );
    }

    #[test]
    fn requested_ttls_are_bounded() {
        assert!(validate(999, 0).is_err());
        assert!(validate(1_000, 0).is_ok());
        assert!(validate(MAX_TTL_MS + 1, 0).is_err());
        assert!(validate(60_000, MAX_GRACE_MS + 1).is_err());
        assert!(validate(u64::MAX, u64::MAX).is_err());
    }

    fn state() -> impl Strategy<Value = Liveness> {
        prop_oneof![
            Just(Liveness::Active),
            Just(Liveness::Idle),
            Just(Liveness::Stalled),
            Just(Liveness::Lost),
            Just(Liveness::Finished),
        ]
    }

    proptest! {
        /// Time never moves a lease up, and the state it gives is the one
        /// `next_due` announced: nothing changes before it, and at it the
        /// lease is deeper.
        #[test]
        fn time_only_deepens_and_next_due_is_exact(
            st in state(),
            ttl in 1_000u64..100_000,
            grace in 0u64..100_000,
            idle in 1u64..1_000_000,
            renewed in 0i64..1_000_000_000,
            changed in 0i64..1_000_000_000,
            dt in 0i64..1_000_000_000,
        ) {
            let l = Lease { ttl_ms: ttl, grace_ms: grace, state: st, ..Lease::default() };
            let s = signs(renewed, changed);
            let now = renewed.max(changed) + dt;
            let got = l.decay(s, idle, now);
            prop_assert!(got.depth() >= st.depth());
            if !st.is_held() {
                prop_assert_eq!(got, st);
            }
            if let Some(due) = l.next_due(s, idle) {
                prop_assert_eq!(l.decay(s, idle, due - 1), st);
                prop_assert!(l.decay(s, idle, due).depth() > st.depth());
            }
        }

        /// A sign of life never makes a lease deeper.
        #[test]
        fn revival_only_lifts(st in state(), wrote in any::<bool>()) {
            if let Some(up) = lease(st).revive(wrote) {
                prop_assert!(up.depth() < st.depth() || st == Liveness::Finished);
            }
        }
    }
}
