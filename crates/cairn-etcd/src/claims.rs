//! This replica's writes in order, per key: a mutation that reads what
//! another of this replica's mutations is committing waits for that commit
//! to reach the copy, then runs on it, instead of racing it through etcd
//! and losing. Sixty-four writers of one session on one replica make one
//! queue, one etcd transaction after another, never a conflict storm; only
//! writers on different replicas can still lose a compare.
//!
//! Each write holds a ticket, taken when it first claims, kept through its
//! reruns. It waits only for lower tickets, so the queue cannot deadlock,
//! and a write that waits leaves its footprint claimed, so later writes of
//! the same keys queue behind it rather than jump ahead.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use tokio::sync::watch;

use crate::txn::Footprint;

/// Where a claimed write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Running, waiting, or its transaction is at etcd.
    Pending,
    /// Committed at this etcd revision: later writes run once the copy
    /// has it.
    Committed(i64),
}

struct Claim {
    footprint: Footprint,
    state: watch::Sender<State>,
}

/// The writes of this replica not yet in its copy.
#[derive(Default)]
pub struct Claims {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    claims: BTreeMap<u64, Claim>,
}

/// What a write must wait for before running again.
pub type Wait = watch::Receiver<State>;

impl Claims {
    /// Claims `footprint` for the write holding `ticket` (taking one if it
    /// has none), which ran on the copy at `snapshot`; `applied` is where
    /// the copy is now. `Err`: an earlier write of this replica changes
    /// what this one touches and is not in its snapshot; wait for it, then
    /// run again. The claim stays (as a place in the queue) either way.
    pub fn claim(
        &self,
        ticket: &mut Option<u64>,
        footprint: Footprint,
        snapshot: i64,
        applied: i64,
    ) -> Result<(), Wait> {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // What the copy has is nobody's to wait for.
        inner
            .claims
            .retain(|_, c| !matches!(*c.state.borrow(), State::Committed(r) if r <= applied));
        let mine = if let Some(t) = *ticket {
            t
        } else {
            inner.next += 1;
            *ticket = Some(inner.next);
            inner.next
        };
        let blocker = inner.claims.range(..mine).rev().find(|(_, c)| {
            let unseen = match *c.state.borrow() {
                State::Pending => true,
                State::Committed(r) => r > snapshot,
            };
            unseen && footprint.depends_on(&c.footprint)
        });
        let wait = blocker.map(|(_, c)| c.state.subscribe());
        if let Some(c) = inner.claims.get_mut(&mine) {
            c.footprint = footprint;
        } else {
            let (state, _) = watch::channel(State::Pending);
            inner.claims.insert(mine, Claim { footprint, state });
        }
        wait.map_or(Ok(()), Err)
    }

    /// The write holding `ticket` committed at `revision`.
    pub fn committed(&self, ticket: u64, revision: i64) {
        let inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = inner.claims.get(&ticket) {
            c.state.send_replace(State::Committed(revision));
        }
    }

    /// The write holding `ticket` ended without a commit: whoever waits
    /// for it runs now.
    pub fn release(&self, ticket: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        // Dropping the sender wakes the waiters.
        inner.claims.remove(&ticket);
    }
}

/// Waits until the write behind `wait` ended; returns the revision it
/// committed at, if it did.
pub async fn settled(mut wait: Wait) -> Option<i64> {
    match wait.wait_for(|s| *s != State::Pending).await {
        Ok(s) => match *s {
            State::Committed(r) => Some(r),
            State::Pending => None,
        },
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(reads: &[&str], writes: &[&str]) -> Footprint {
        Footprint {
            reads: reads.iter().map(|k| k.as_bytes().to_vec()).collect(),
            ranges: Vec::new(),
            writes: writes.iter().map(|k| k.as_bytes().to_vec()).collect(),
        }
    }

    #[test]
    fn writes_of_one_key_queue_and_others_pass() {
        let claims = Claims::default();
        let (mut first, mut second, mut other) = (None, None, None);
        assert!(
            claims
                .claim(&mut first, fp(&["p/1"], &["p/1"]), 10, 10)
                .is_ok()
        );
        // Same plan: waits for a.
        let wait = claims.claim(&mut second, fp(&["p/1"], &["p/1"]), 10, 10);
        assert!(wait.is_err());
        // Another plan: goes at once.
        assert!(
            claims
                .claim(&mut other, fp(&["p/2"], &["p/2"]), 10, 10)
                .is_ok()
        );
        // A fourth on plan 1 queues behind b, not a.
        let mut fourth = None;
        let Err(behind) = claims.claim(&mut fourth, fp(&["p/1"], &["p/1"]), 10, 10) else {
            panic!("d must wait");
        };
        claims.committed(first.expect("ticket"), 11);
        assert_eq!(*behind.borrow(), State::Pending, "d waits for b, not a");
        // b, run again on a snapshot holding a's commit, goes.
        assert!(
            claims
                .claim(&mut second, fp(&["p/1"], &["p/1"]), 11, 11)
                .is_ok()
        );
        // d still waits for b; once b gives up, d goes.
        assert!(
            claims
                .claim(&mut fourth, fp(&["p/1"], &["p/1"]), 11, 11)
                .is_err()
        );
        claims.release(second.expect("ticket"));
        assert!(
            claims
                .claim(&mut fourth, fp(&["p/1"], &["p/1"]), 11, 11)
                .is_ok()
        );
    }

    #[test]
    fn a_commit_in_the_snapshot_is_not_waited_for() {
        let claims = Claims::default();
        let (mut a, mut b) = (None, None);
        assert!(claims.claim(&mut a, fp(&[], &["p/1"]), 10, 10).is_ok());
        claims.committed(a.expect("ticket"), 11);
        assert!(
            claims
                .claim(&mut b, fp(&["p/1"], &["p/1"]), 10, 10)
                .is_err()
        );
        assert!(claims.claim(&mut b, fp(&["p/1"], &["p/1"]), 11, 10).is_ok());
    }

    #[test]
    fn a_range_read_waits_for_a_write_inside_it() {
        let claims = Claims::default();
        let (mut a, mut b) = (None, None);
        assert!(claims.claim(&mut a, fp(&[], &["c/x/y"]), 1, 1).is_ok());
        let mut f = fp(&[], &[]);
        f.ranges.push((b"c/x/".to_vec(), b"c/x0".to_vec()));
        assert!(claims.claim(&mut b, f, 1, 1).is_err());
    }
}
