//! `Wait`: block until every plan of a session tree (or of listed
//! sessions) is completed, or anything changes, or a timeout passes.

use std::time::Duration;

use cairn_core::error::{Error, Result};
use cairn_core::liveness::Liveness;
use cairn_core::plan::PlanItem;
use cairn_core::session::Session;
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
    /// Sessions of the target whose agents are lost, with plans unfinished.
    pub lost: Vec<Lost>,
}

/// A session waited for whose agent is lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub session: Session,
    /// The step it was at, if it had a plan.
    pub step: Option<PlanItem>,
}

/// What one look at the target found.
struct Look {
    plans: Vec<PlanRecord>,
    complete: bool,
    lost: Vec<Lost>,
    revision: u64,
}

impl Look {
    fn answer(self, satisfied: bool) -> WaitOutcome {
        WaitOutcome {
            satisfied,
            revision: self.revision,
            plans: self.plans,
            lost: self.lost,
        }
    }
}

/// Blocks until `condition` holds on `target` or `timeout` passes, or,
/// with `fail_fast`, until an agent it waits for is lost.
pub async fn wait(
    store: &Store,
    target: WaitTarget,
    condition: Condition,
    timeout: Duration,
    fail_fast: bool,
) -> Result<WaitOutcome> {
    let deadline = tokio::time::Instant::now() + timeout;
    let hub_target = match &target {
        WaitTarget::Tree(root) => Topic::Tree(root.clone()),
        WaitTarget::Sessions(ids) => Topic::Sessions(ids.iter().cloned().collect()),
    };
    // Subscribe before reading, so a change between the two is not missed.
    let (mut sub, _) = store.hub().subscribe(&hub_target);
    let first = read_target(store, &target).await?;
    let start = first.revision;
    if condition == Condition::AllPlansCompleted && first.complete {
        return Ok(first.answer(true));
    }
    if fail_fast && !first.lost.is_empty() {
        return Ok(first.answer(false));
    }
    drop(first);
    loop {
        tokio::select! {
            received = sub.next() => match received {
                // A change the target may care about, or already read.
                Some(rev) if rev.revision > start || sub.overflowed() => {}
                Some(_) => continue,
                None => return Err(Error::ShuttingDown),
            },
            () = tokio::time::sleep_until(deadline) => {
                let look = read_target(store, &target).await?;
                let satisfied = condition == Condition::AllPlansCompleted && look.complete;
                return Ok(look.answer(satisfied));
            }
        }
        // Decide from the state, not the event: several changes may have
        // landed, and a full buffer only means "look again".
        sub.resync();
        while matches!(sub.try_next(), Next::Revision(_)) {}
        let look = read_target(store, &target).await?;
        let satisfied = match condition {
            Condition::AllPlansCompleted => look.complete,
            Condition::AnyChange => look.revision > start,
        };
        if satisfied {
            return Ok(look.answer(true));
        }
        if fail_fast && !look.lost.is_empty() {
            return Ok(look.answer(false));
        }
    }
}

/// Plans of the target, whether all are complete, the lost, and the
/// revision, from one snapshot.
async fn read_target(store: &Store, target: &WaitTarget) -> Result<Look> {
    let target = target.clone();
    let mut look = store
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
            let mut lost = Vec::new();
            let mut complete = true;
            for id in &ids {
                let stored = v.plan(id)?;
                let is_root = root.as_deref() == Some(id.as_str());
                let done = match &stored {
                    Some(p) => p.plan.is_complete(),
                    None => is_root,
                };
                complete &= done;
                if !done
                    && let Some(s) = v.session(id)?
                    && s.lease.as_ref().is_some_and(|l| l.state == Liveness::Lost)
                {
                    let step = stored
                        .as_ref()
                        .and_then(|p| p.plan.checklist.current().cloned());
                    lost.push(Lost { session: s, step });
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
            Ok(Look {
                plans,
                complete,
                lost,
                revision,
            })
        })
        .await?;
    for l in &mut look.lost {
        store.show_last_seen(&mut l.session);
    }
    Ok(look)
}
