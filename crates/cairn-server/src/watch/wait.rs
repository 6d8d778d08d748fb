//! `Wait`: block until every plan of a session tree (or of listed
//! sessions) is completed, or anything changes, or a timeout passes.

use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_store::hub::{Next, Topic};
use cairn_store::records::PlanRecord;
use cairn_store::{Store, ops};

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
    let deadline = tokio::time::Instant::now() + timeout;
    let hub_target = match &target {
        WaitTarget::Tree(root) => Topic::Tree(root.clone()),
        WaitTarget::Sessions(ids) => Topic::Sessions(ids.iter().cloned().collect()),
    };
    // Subscribe before reading, so a change between the two is not missed.
    let (mut sub, _) = store.hub().subscribe(&hub_target);
    let (plans, complete, start) = read_target(store, &target).await?;
    if condition == Condition::AllPlansCompleted && complete {
        return Ok(WaitOutcome {
            satisfied: true,
            revision: start,
            plans,
        });
    }
    drop(plans);
    loop {
        tokio::select! {
            received = sub.next() => match received {
                // A change the target may care about, or already read.
                Some(rev) if rev.revision > start || sub.overflowed() => {}
                Some(_) => continue,
                None => return Err(Error::ShuttingDown),
            },
            () = tokio::time::sleep_until(deadline) => {
                let (plans, complete, revision) = read_target(store, &target).await?;
                let satisfied = condition == Condition::AllPlansCompleted && complete;
                return Ok(WaitOutcome { satisfied, revision, plans });
            }
        }
        // Decide from the state, not the event: several changes may have
        // landed, and a full buffer only means "look again".
        sub.resync();
        while matches!(sub.try_next(), Next::Revision(_)) {}
        let (plans, complete, revision) = read_target(store, &target).await?;
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

/// Plans of the target, whether all are complete, and the revision, from
/// one snapshot.
async fn read_target(store: &Store, target: &WaitTarget) -> Result<(Vec<PlanRecord>, bool, u64)> {
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
            Ok((plans, complete, revision))
        })
        .await
}
