//! Approval deadlines through the store: the deadlines of waiting items
//! read at start, and the driver that applies each as it passes (the queue
//! itself is [`crate::deadlines`]).
//!
//! ```text
//!  Hub::dispatch ─▶ Deadlines::observe (inbox events: added, escalated, gone)
//!  start: Store::load_deadlines (every waiting item's deadline, from the index)
//!  driver: sleep until Deadlines::next_due ─▶ Deadlines::due ─▶
//!          PlanCommand::Deadline (applied only while the item still waits
//!          with that deadline: of several servers, one applies it)
//! ```

use std::time::Duration;

use cairn_core::Micros;
use cairn_core::access::Caller;
use cairn_core::command::{Command, PlanCommand, PlanWrite};
use cairn_core::error::{Error, Result};
use cairn_core::inbox::Awaiting;

use crate::clock::now_micros;
use crate::deadlines::Due;
use crate::store::Store;

/// Deadline commands in flight at once.
const IN_FLIGHT: usize = 64;
/// The longest the driver sleeps without looking.
const IDLE_TICK: Duration = Duration::from_secs(1);
/// How long after a failed attempt (the store unavailable) it is tried again.
const RETRY_MICROS: Micros = 1_000_000;
/// Waiting items read at once while loading.
const BATCH: usize = 256;

impl Store {
    /// Reads the deadline of every waiting item (from the index of them)
    /// and queues those that act; one passed already is due at once.
    pub async fn load_deadlines(&self) -> Result<usize> {
        let found = self
            .read(|v| {
                let mut out = Vec::new();
                let mut cursor: Option<Awaiting> = None;
                loop {
                    let keys = v.awaiting_after(cursor.as_ref(), BATCH)?;
                    let exhausted = keys.len() < BATCH;
                    for key in keys {
                        cursor = Some(key.clone());
                        let Some(record) = v.plan(&key.session_id)? else {
                            continue;
                        };
                        if let Some(d) = record.plan.mode.deadline_of(key.item)
                            && d.acts()
                        {
                            out.push(Due { at: d.at, key });
                        }
                    }
                    if exhausted {
                        return Ok(out);
                    }
                }
            })
            .await?;
        let n = found.len();
        self.hub().deadlines().load(found);
        Ok(n)
    }

    /// Applies each deadline as it passes, until the store closes.
    pub async fn drive_deadlines(self) {
        let deadlines = self.hub().deadlines();
        let mut flight = tokio::task::JoinSet::new();
        loop {
            let now = now_micros();
            let sleep = match deadlines.next_due() {
                Some(due) => Duration::from_micros(u64::try_from(due - now).unwrap_or(0)),
                None => IDLE_TICK,
            }
            .min(IDLE_TICK);
            if !sleep.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(sleep) => {}
                    () = deadlines.wake.notified() => {}
                }
            }
            if self.hub().is_closed() {
                return;
            }
            for d in deadlines.due(now_micros()) {
                while flight.len() >= IN_FLIGHT {
                    flight.join_next().await;
                }
                let store = self.clone();
                flight.spawn(async move { store.pass(d).await });
            }
            while flight.try_join_next().is_some() {}
        }
    }

    async fn pass(&self, d: Due) {
        let command = Command::Plan(PlanWrite {
            session_id: d.key.session_id.clone(),
            expected_revision: None,
            command: PlanCommand::Deadline {
                item: d.key.item,
                at: d.at,
            },
        });
        match self.apply(&Caller::Open, command, 64).await {
            Ok((_, rev)) => {
                tracing::info!(
                    session_id = d.key.session_id,
                    item = d.key.item.key(),
                    rev,
                    "approval deadline applied"
                );
            }
            // Decided, applied by another server, or gone: nothing to do.
            Err(
                Error::DeadlineMoved
                | Error::NoPendingPlan
                | Error::NoActivePlan
                | Error::ModificationNotFound(_)
                | Error::SessionNotFound(_),
            ) => {}
            Err(e) => {
                tracing::warn!(session_id = d.key.session_id, error = %e, "approval deadline not applied yet");
                self.hub()
                    .deadlines()
                    .retry(d, now_micros().saturating_add(RETRY_MICROS));
            }
        }
    }
}
