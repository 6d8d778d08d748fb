//! Leases through the store: `KeepAlive`, the leases read at start, and
//! the driver that writes each liveness transition as a command.
//!
//! ```text
//!  KeepAlive ─▶ Lessor::renew ── renewed in memory ──▶ answered
//!                    └── the stored lease must change ──▶ LeaseOp::Hold (a write)
//!  driver: sleep until Lessor::next_due ─▶ Lessor::due ─▶ LeaseOp::Mark (writes,
//!          each applied only at the revision it was decided at)
//!  Hub::dispatch ─▶ Lessor::observe (what was committed, here or elsewhere)
//!  every REPLICA_CHECK: Lessor::holders, then Backend::replicas ─▶
//!          Lessor::follow_replicas (the leases of a dead replica adopted)
//! ```

use std::time::Duration;

use cairn_core::access::Caller;
use cairn_core::command::{Command, LeaseOp, SessionCommand};
use cairn_core::error::{Error, Result};
use cairn_core::liveness::Lease;
use cairn_core::session::Session;

use crate::lessor::{Renewal, Transition};
use crate::{Store, ops};

/// How many transitions the driver has in flight at once: expiring a
/// thousand sessions queues them for group commit, not one by one.
const IN_FLIGHT: usize = 256;

/// The longest the driver sleeps without looking (a safety net: it is
/// woken when something falls due sooner).
const IDLE_TICK: Duration = Duration::from_secs(1);

/// How often the live replicas are read, while leases held by another
/// replica are followed (one small read; nothing when there are none).
const REPLICA_CHECK: Duration = Duration::from_secs(1);

/// What a keep-alive asks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeepAlive {
    pub session_id: String,
    /// The TTL and grace to hold the lease with; the server's defaults
    /// when `None`.
    pub ttl_ms: Option<u64>,
    pub grace_ms: Option<u64>,
    /// The agent is done: release the lease as `FINISHED`.
    pub finished: bool,
}

impl Store {
    /// Renews (or takes, or releases) the lease of a session on behalf of
    /// `caller`, who needs the right to write its plan. A renewal of a
    /// lease held as it is costs no write; the answer is the session's
    /// lease and the revision it was read or written at.
    pub async fn keep_alive(&self, caller: &Caller, req: KeepAlive) -> Result<(Lease, u64)> {
        self.limits()
            .check_resource_id("session_id", &req.session_id)?;
        let leases = self.hub().leases();
        let (ttl, grace) = leases.defaults();
        let (ttl_ms, grace_ms) = (req.ttl_ms.unwrap_or(ttl), req.grace_ms.unwrap_or(grace));
        cairn_core::liveness::validate(ttl_ms, grace_ms)?;
        if !req.finished
            && let Renewal::Renewed(lease) =
                leases.renew(caller, &req.session_id, false, Some((ttl_ms, grace_ms)))?
        {
            return Ok((lease, self.revision()));
        }
        let holder = leases.config().holder;
        let op = if req.finished {
            LeaseOp::Release {
                ttl_ms,
                grace_ms,
                holder,
            }
        } else {
            LeaseOp::Hold {
                ttl_ms,
                grace_ms,
                holder,
            }
        };
        let command = Command::Session(SessionCommand::Lease {
            session_id: req.session_id.clone(),
            op,
        });
        let (applied, rev) = self.apply(caller, command, 64).await?;
        let session = applied.into_session()?;
        let lease = session.lease.ok_or_else(|| {
            Error::Internal(format!(
                "session {} holds no lease after a keep-alive",
                req.session_id
            ))
        })?;
        Ok((lease, rev))
    }

    /// A leased session's lease, from memory (no access check: for a
    /// caller that has read the session).
    pub fn lease(&self, session_id: &str) -> Option<Lease> {
        self.hub().leases().lease(session_id)
    }

    /// Reads every leased session (from the index of them: a store of a
    /// million sessions with a few leased reads a few) and arms it with a
    /// full TTL from now (at start: the time this server was down is no
    /// agent's fault).
    pub async fn load_leases(&self) -> Result<usize> {
        let found = self
            .read(|v| {
                let mut out: Vec<(Session, Vec<String>)> = Vec::new();
                for id in v.leased()? {
                    if let Some(s) = v.session(&id)?
                        && s.lease.is_some()
                    {
                        let chain = ops::ancestors(v, s.parent_session_id.as_deref())?;
                        out.push((s, chain));
                    }
                }
                Ok(out)
            })
            .await?;
        let n = found.len();
        let leases = self.hub().leases();
        leases.load(found, leases.now());
        Ok(n)
    }

    /// Announces this server as the replica `name` for as long as it runs,
    /// where several share the store (etcd); see [`Store::drive_leases`].
    pub async fn announce(&self, name: &str) -> Result<()> {
        self.backend().announce(name).await
    }

    /// The replicas alive now, where several share the store (etcd); None
    /// where this server is the only one.
    pub async fn live_replicas(&self) -> Result<Option<std::collections::BTreeSet<String>>> {
        self.backend().replicas().await
    }

    /// Writes liveness transitions as they fall due, and adopts the leases
    /// of replicas that died, until the store closes.
    pub async fn drive_leases(self) {
        tokio::join!(self.clone().expire(), self.follow_replicas());
    }

    /// Each transition is a `LeaseOp::Mark` applied only at the revision it
    /// was decided at: of several servers deciding the same change, one
    /// writes it, and a sign of life that landed in between wins.
    async fn expire(self) {
        let leases = self.hub().leases();
        let mut flight = tokio::task::JoinSet::new();
        loop {
            let now = leases.now();
            let sleep = match leases.next_due() {
                Some(due) if due <= now => Duration::ZERO,
                Some(due) => {
                    Duration::from_micros(u64::try_from(due - now).unwrap_or(0)).min(IDLE_TICK)
                }
                None => IDLE_TICK,
            };
            if !sleep.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(sleep) => {}
                    () = leases.wake.notified() => {}
                }
            }
            if self.hub().is_closed() {
                return;
            }
            for t in leases.due(leases.now()) {
                while flight.len() >= IN_FLIGHT {
                    flight.join_next().await;
                }
                let store = self.clone();
                flight.spawn(async move { store.mark(t).await });
            }
            while flight.try_join_next().is_some() {}
        }
    }

    /// Reads which replicas are alive and adopts the leases of the others.
    /// The holders are read first: a replica announces itself before it
    /// takes a lease, so any holder named then and missing from the later
    /// answer is gone, not yet to come.
    async fn follow_replicas(self) {
        let leases = self.hub().leases();
        while !self.hub().is_closed() {
            tokio::time::sleep(REPLICA_CHECK).await;
            let known = leases.holders();
            if known.is_empty() {
                continue;
            }
            match self.backend().replicas().await {
                Ok(Some(alive)) => {
                    for holder in leases.follow_replicas(&known, &alive, leases.now()) {
                        tracing::warn!(
                            holder,
                            "a replica is gone: its leases are now timed here, each with a full TTL"
                        );
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "live replicas not read"),
            }
        }
    }

    async fn mark(&self, t: Transition) {
        let Transition {
            session_id,
            to,
            expected_revision,
            last_seen,
        } = t;
        let command = Command::Session(SessionCommand::Lease {
            session_id: session_id.clone(),
            op: LeaseOp::Mark {
                to,
                expected_revision,
                last_seen,
            },
        });
        match self.apply(&Caller::Open, command, 64).await {
            Ok(_) => tracing::debug!(session_id, to = to.as_str(), "liveness"),
            // Deleted since: nothing to mark. Anything else is retried by
            // the lessor once its retry falls due.
            Err(Error::SessionNotFound(_)) => {}
            Err(e) => tracing::warn!(session_id, error = %e, "liveness transition not written"),
        }
    }
}
