//! Webhooks through the store: subscriptions, and the outbox they are
//! delivered from.
//!
//! ```text
//!  the log (every committed revision) ── notifications(rev) ──▶ what a
//!      subscription wants, in revision order
//!  cursor   aux "webhook-cursor"/{id}: the last revision handled (delivered
//!           or dead-lettered); a delivery is at least once because the
//!           cursor moves only after it
//!  dead     aux "webhook-dead"/{id}/{revision:020}/{index:04}: given up
//!  retry    aux "webhook-retry"/…: dead letters an admin queued again
//! ```
//!
//! The outbox is the log itself: a committed revision's notifications are
//! durable with it, and a server killed between the commit and a delivery
//! delivers from the cursor when it starts again. The compactor keeps
//! every revision a subscription has not handled yet. What the deliverer
//! reads and writes through the store is in [`crate::outbox`].

use cairn_core::access::{self, Caller};
use cairn_core::command::WebhookCommand;
use cairn_core::error::{Error, Result};
use cairn_core::liveness::Liveness;
use cairn_core::plan_mode::Outcome;
use cairn_core::task::{Following, Resume, TaskState, plan_state};
use cairn_core::webhook::{EventType, TaskPush};
use cairn_core::{Micros, rfc3339};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::codec;
use crate::records::{Decided, EventKind, EventObject, Revision};
use crate::seam::{Ctx, ReadTxn};

/// Subscriptions, by id.
pub const WEBHOOKS: &str = "webhook";
/// Each subscription's last handled revision.
pub const CURSORS: &str = "webhook-cursor";
/// Deliveries given up on.
pub const DEAD: &str = "webhook-dead";
/// Dead letters queued for delivery again.
pub const RETRY: &str = "webhook-retry";
/// Push notification configs one task may have.
pub const MAX_TASK_PUSHES: usize = 16;

/// One thing to tell a subscription: its type, where it comes from, and
/// the body (`type`, `timestamp`, `data` with the revision).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub kind: EventType,
    pub revision: u64,
    /// Its place among the revision's notifications.
    pub index: u32,
    pub session_id: String,
    pub ancestors: Vec<String>,
    pub body: Value,
}

impl Notification {
    /// Where it is kept if given up on: orders dead letters by revision.
    pub fn key(&self, webhook_id: &str) -> String {
        format!("{webhook_id}/{:020}/{:04}", self.revision, self.index)
    }

    /// The `webhook-id` of its deliveries: the same for every attempt, so
    /// a receiver can drop a repeat.
    pub fn message_id(&self, webhook_id: &str) -> String {
        format!("msg_{webhook_id}_{}_{}", self.revision, self.index)
    }
}

/// A delivery given up on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    pub notification: Notification,
    pub attempts: u32,
    pub last_error: String,
    pub dead_time: Micros,
}

/// What a committed revision tells webhooks, in the order of its events.
pub fn notifications(rev: &Revision) -> Vec<Notification> {
    let mut out = Vec::new();
    for e in &rev.events {
        if e.moved && e.kind.is_inbox() {
            // An item carried along by a move: nothing was asked or decided.
            continue;
        }
        let (kind, what, value) = match (&e.kind, &e.object) {
            (EventKind::InboxAdded, EventObject::Inbox(item)) => {
                let escalated = item
                    .deadline
                    .as_ref()
                    .is_some_and(|d| !d.escalated_to.is_empty() && d.escalate_time == rev.time);
                let kind = if escalated {
                    EventType::ApprovalEscalated
                } else {
                    EventType::ApprovalRequested
                };
                (kind, "item", serde_json::to_value(item))
            }
            (EventKind::InboxRemoved, EventObject::Inbox(item))
                if item
                    .resolution
                    .as_ref()
                    .is_some_and(|r| r.decision != Decided::Withdrawn) =>
            {
                (
                    EventType::ApprovalDecided,
                    "item",
                    serde_json::to_value(item),
                )
            }
            (EventKind::PlanUpdated, EventObject::Plan(plan))
                if e.closed == Some(Outcome::Completed) =>
            {
                (EventType::PlanCompleted, "plan", serde_json::to_value(plan))
            }
            (EventKind::SessionUpdated, EventObject::Session(s))
                if s.lease
                    .as_ref()
                    .is_some_and(|l| l.state == Liveness::Lost && l.since == rev.time) =>
            {
                (EventType::SessionLost, "session", serde_json::to_value(s))
            }
            _ => continue,
        };
        let Ok(value) = value else { continue };
        let index = u32::try_from(out.len()).unwrap_or(u32::MAX);
        out.push(Notification {
            kind,
            revision: rev.revision,
            index,
            session_id: e.session_id.clone(),
            ancestors: e.ancestors.clone(),
            body: json!({
                "type": kind.name(),
                "timestamp": rfc3339(rev.time),
                "data": {
                    "revision": rev.revision,
                    "session_id": e.session_id,
                    "agent_id": e.agent_id,
                    "ancestors": e.ancestors,
                    what: value,
                },
            }),
        });
    }
    out
}

/// What a committed revision tells a task's push config: the task's new
/// state, in A2A's `StreamResponse` shape, when the revision changed it
/// (`following` holds what the config was last told, and moves on).
pub fn task_notification(
    rev: &Revision,
    task_id: &str,
    following: &mut Following,
) -> Option<Notification> {
    let mut of_plan = None;
    let mut lost = None;
    let mut ancestors = None;
    for e in rev.events.iter().filter(|e| e.session_id == task_id) {
        match &e.object {
            EventObject::Plan(p) if e.kind == EventKind::PlanUpdated => {
                of_plan = Some(plan_state(&p.plan));
            }
            EventObject::Session(s) if e.kind != EventKind::SessionDeleted => {
                lost = Some(s.lease.as_ref().is_some_and(|l| l.state == Liveness::Lost));
            }
            _ => continue,
        }
        ancestors = Some(e.ancestors.clone());
    }
    let state = following.revision(of_plan, lost)?;
    let ancestors = ancestors.unwrap_or_default();
    let context = ancestors.first().map_or(task_id, String::as_str);
    let wire = format!(
        "TASK_STATE_{}",
        state.name().to_uppercase().replace('-', "_")
    );
    let body = json!({
        "statusUpdate": {
            "taskId": task_id,
            "contextId": context,
            "status": {"state": wire, "timestamp": rfc3339(rev.time)},
            "metadata": {
                "cairn_resume": Resume { revision: rev.revision, state }.token(),
                "cairn_revision": rev.revision.to_string(),
            },
        },
    });
    Some(Notification {
        kind: EventType::TaskStatus,
        revision: rev.revision,
        index: 0,
        session_id: task_id.to_owned(),
        ancestors,
        body,
    })
}

/// A webhook command, inside the write: admins only, except a task's push
/// config, which whoever manages the session may make and delete (checked,
/// and its state filled in, by the caller: `ops`, which knows sessions);
/// each is a revision (without events: nothing a watcher follows changed).
pub(crate) fn apply(ctx: &mut Ctx<'_>, caller: &Caller, c: &WebhookCommand) -> Result<u64> {
    match c {
        WebhookCommand::Create(w) => {
            let mut w = w.clone();
            if w.task.is_none() {
                access::check_admin(caller)?;
            }
            if ctx.txn.aux(WEBHOOKS, &w.webhook_id)?.is_some() {
                return Err(Error::WebhookExists(w.webhook_id.clone()));
            }
            if let Some(push) = &w.task {
                let group = TaskPush::group(&push.task_id);
                let held = letters(ctx.txn, WEBHOOKS, &group, None, MAX_TASK_PUSHES)?;
                if held.len() >= MAX_TASK_PUSHES {
                    return Err(Error::LimitExceeded {
                        field: "task_id".into(),
                        what: "push notification configs per task",
                        limit: MAX_TASK_PUSHES,
                        actual: held.len() + 1,
                    });
                }
            }
            w.created_by = access::submitter_id(caller);
            w.revision = ctx.next_revision();
            w.create_time = ctx.now;
            ctx.txn
                .put_aux(WEBHOOKS, &w.webhook_id, &codec::encode(&w)?)?;
        }
        WebhookCommand::Delete { webhook_id } => {
            if TaskPush::task_of(webhook_id).is_none() {
                access::check_admin(caller)?;
            }
            if ctx.txn.aux(WEBHOOKS, webhook_id)?.is_none() {
                return Err(Error::WebhookNotFound(webhook_id.clone()));
            }
            delete_subscription(ctx, webhook_id)?;
        }
        WebhookCommand::Retry { webhook_id, key } => {
            access::check_admin(caller)?;
            let letter = match key.strip_prefix(&format!("{webhook_id}/")) {
                Some(_) => ctx.txn.aux(DEAD, key)?,
                None => None,
            };
            let Some(letter) = letter else {
                return Err(Error::DeadLetterNotFound(key.clone()));
            };
            ctx.txn.delete_aux(DEAD, key)?;
            ctx.txn.put_aux(RETRY, key, &letter)?;
        }
    }
    ctx.commit(Vec::new())
}

/// A subscription with its cursor and its letters.
fn delete_subscription(ctx: &mut Ctx<'_>, webhook_id: &str) -> Result<()> {
    ctx.txn.delete_aux(WEBHOOKS, webhook_id)?;
    ctx.txn.delete_aux(CURSORS, webhook_id)?;
    for space in [DEAD, RETRY] {
        for (key, _) in letters(ctx.txn, space, webhook_id, None, usize::MAX)? {
            ctx.txn.delete_aux(space, &key)?;
        }
    }
    Ok(())
}

/// Drops a deleted session's push notification configs, inside its
/// deletion: a session made again under the id starts with none, and
/// nobody is told of a task that is gone.
pub(crate) fn forget_task(ctx: &mut Ctx<'_>, task_id: &str) -> Result<()> {
    let group = TaskPush::group(task_id);
    for (key, _) in letters(ctx.txn, WEBHOOKS, &group, None, MAX_TASK_PUSHES)? {
        delete_subscription(ctx, &key)?;
    }
    Ok(())
}

/// Entries of `space` for one subscription, after `after`, at most `limit`.
pub(crate) fn letters(
    v: &dyn ReadTxn,
    space: &str,
    webhook_id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<(String, Vec<u8>)>> {
    let prefix = format!("{webhook_id}/");
    let mut out = Vec::new();
    let mut cursor = after.map_or_else(|| prefix.clone(), str::to_owned);
    while out.len() < limit {
        let page = v.aux_after(space, Some(&cursor), 256)?;
        let done = page.len() < 256;
        for (key, value) in page {
            if !key.starts_with(&prefix) || out.len() >= limit {
                return Ok(out);
            }
            cursor.clone_from(&key);
            out.push((key, value));
        }
        if done {
            break;
        }
    }
    Ok(out)
}

/// A stored cursor's revision (its first 8 bytes).
pub(crate) fn cursor(bytes: &[u8]) -> u64 {
    bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or_default()
}

/// A task push's cursor also holds the state last told (a 9th byte).
pub(crate) fn cursor_state(bytes: &[u8]) -> Option<TaskState> {
    let i = usize::from(*bytes.get(8)?);
    TaskState::ALL.get(i).copied()
}

/// The bytes of a cursor at `revision`, with the state last told.
pub(crate) fn cursor_bytes(revision: u64, told: Option<TaskState>) -> Vec<u8> {
    let mut out = revision.to_be_bytes().to_vec();
    if let Some(i) = told.and_then(|t| TaskState::ALL.iter().position(|s| *s == t)) {
        out.push(u8::try_from(i).unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{Event, InboxItem, Resolution};
    use cairn_core::inbox::{Awaited, Awaiting};
    use cairn_core::session::Session;

    fn item(resolution: Option<Resolution>) -> InboxItem {
        InboxItem {
            key: Awaiting {
                since: 1,
                session_id: "coder".into(),
                item: Awaited::Plan,
            },
            session: Session {
                session_id: "coder".into(),
                ..Session::default()
            },
            goal: String::new(),
            plan_id: "p".into(),
            summary: "s".into(),
            modification: None,
            submitted_by: String::new(),
            deadline: None,
            resolution,
        }
    }

    #[test]
    fn a_revision_tells_what_happened_and_withdrawals_tell_nothing() {
        let decided = Resolution {
            decision: Decided::Rejected,
            by: "lead".into(),
            reason: "no".into(),
        };
        let withdrawn = Resolution {
            decision: Decided::Withdrawn,
            by: String::new(),
            reason: String::new(),
        };
        let rev = Revision {
            revision: 7,
            time: 1_000_000,
            events: vec![
                Event::inbox(EventKind::InboxAdded, item(None), vec!["orch".into()]),
                Event::inbox(EventKind::InboxRemoved, item(Some(decided)), vec![]),
                Event::inbox(EventKind::InboxRemoved, item(Some(withdrawn)), vec![]),
                // Carried along by a move: neither asked nor decided.
                Event {
                    moved: true,
                    ..Event::inbox(EventKind::InboxAdded, item(None), vec![])
                },
            ],
        };
        let n = notifications(&rev);
        let kinds: Vec<_> = n.iter().map(|n| (n.kind, n.index)).collect();
        assert_eq!(
            kinds,
            vec![
                (EventType::ApprovalRequested, 0),
                (EventType::ApprovalDecided, 1)
            ]
        );
        assert_eq!(n[0].body["data"]["revision"], 7);
        assert_eq!(n[0].body["type"], "approval.requested");
        assert_eq!(n[0].ancestors, vec!["orch".to_owned()]);
        assert_eq!(n[1].body["data"]["item"]["resolution"]["reason"], "no");
        assert_eq!(n[1].key("ops"), "ops/00000000000000000007/0001");
    }

    #[test]
    fn a_cursor_reads_back_with_and_without_a_state() {
        for told in [
            None,
            Some(TaskState::InputRequired),
            Some(TaskState::Failed),
        ] {
            let b = cursor_bytes(u64::MAX - 3, told);
            assert_eq!((cursor(&b), cursor_state(&b)), (u64::MAX - 3, told));
        }
        assert_eq!(cursor(&[]), 0);
    }
}
