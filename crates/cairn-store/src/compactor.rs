//! Background compaction of the event log.
//!
//! The log holds at most the newest `revisions` revisions, none older than
//! `age`: a revision past either limit is dropped, in bounded chunks, each its own small
//! write through the writer queue, so compaction interleaves with mutations
//! instead of stalling them. Watchers asking for a dropped revision get
//! `REVISION_COMPACTED` and re-read the current state.

use std::time::Duration;

use crate::clock::now_micros;
use crate::store::Store;
use cairn_core::error::{Error, Result};

/// How much history the event log keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// Most revisions kept (the newest ones).
    pub revisions: u64,
    /// Oldest revision kept, by commit time.
    pub age: Duration,
    /// How often the compactor looks.
    pub interval: Duration,
    /// Most revisions dropped by one write.
    pub chunk: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            revisions: 1_000_000,
            age: Duration::from_secs(24 * 60 * 60),
            interval: Duration::from_secs(60),
            chunk: 4096,
        }
    }
}

/// Runs until the store shuts down.
pub async fn run(store: Store, retention: Retention) {
    // The first pass waits an interval too: start-up has better things to
    // do, and nothing expires faster for it.
    let period = retention.interval.max(Duration::from_millis(1));
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        loop {
            match compact_once(&store, retention).await {
                Ok(true) => tokio::task::yield_now().await,
                Ok(false) => break,
                Err(Error::ShuttingDown) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "log compaction failed; will retry");
                    break;
                }
            }
        }
    }
}

/// Drops one chunk of expired revisions. Returns whether more may be due.
pub async fn compact_once(store: &Store, retention: Retention) -> Result<bool> {
    let age_micros = i64::try_from(retention.age.as_micros()).unwrap_or(i64::MAX);
    let cutoff_time = now_micros().saturating_sub(age_micros);
    let chunk = retention.chunk.max(1);
    let (compact, current, mut target) = store
        .read(move |v| {
            let compact = v.compact_revision()?;
            let current = v.revision()?;
            let limit = compact.saturating_add(chunk);
            // Expired by count: everything but the newest `revisions`.
            let target = current.saturating_sub(retention.revisions).min(limit);
            Ok((compact, current, target))
        })
        .await?;
    // Expired by age: revisions inside the count window may still be too
    // old. Only their commit times are read, never the events.
    let limit = compact.saturating_add(chunk).min(current);
    let from = target.max(compact) + 1;
    if from <= limit {
        let n = usize::try_from(limit - from + 1).unwrap_or(usize::MAX);
        for (revision, time) in store.revision_times(from, n).await? {
            if time >= cutoff_time {
                break;
            }
            target = revision;
        }
    }
    // The log is the webhooks' outbox: what a subscription has not handled
    // yet stays, however old.
    let target = match store.oldest_undelivered().await? {
        Some(oldest) => target.min(oldest.saturating_sub(1)),
        None => target,
    };
    if target <= compact {
        return Ok(false);
    }
    store.write(0, move |ctx| ctx.compact_log(target)).await?;
    crate::telemetry::compact_revision(target);
    tracing::debug!(compact_revision = target, "event log compacted");
    Ok(target == compact + chunk)
}
