//! Writes, written against [`ReadTxn`] / [`WriteTxn`]: [`apply`] is the
//! one way a [`Command`] changes the store.
//!
//! Each write loads what it needs, checks access once, checks
//! `expected_revision`, runs the pure rule on a copy, and only then writes
//! and logs its events. So an error at any point before the writes leaves
//! the transaction untouched, and a retried transaction (etcd) runs the
//! same command value again.

use std::collections::HashMap;

use cairn_core::access::{self, Action, Caller, Role, SessionFacts};
use cairn_core::command::{
    Command, Decision, LeaseOp, PlanCommand, PlanOutcome, PlanWrite, PrincipalCommand,
    SessionCommand, SessionPatch, TodoCommand, WebhookCommand,
};
use cairn_core::deadline::Deadline;
use cairn_core::error::{Error, Result};
use cairn_core::inbox::{self, Awaited};
use cairn_core::liveness::{self, Lease, Liveness};
use cairn_core::plan_mode::PlanModeState;
use cairn_core::session::{self, Session};
use cairn_core::task::task_state;
use cairn_core::todo::{self, TodoInput};
use cairn_core::webhook::TaskPush;
use cairn_core::{Limits, SessionPlan, check_expected_revision};

use crate::records::{
    Decided, Event, EventKind, EventObject, InboxItem, PlanRecord, PrincipalRecord, Resolution,
    SessionPage, TodoRecord,
};
use crate::seam::{Ctx, ReadTxn};

/// Loads a session or fails with NOT_FOUND.
pub fn require_session(view: &dyn ReadTxn, id: &str) -> Result<Session> {
    view.session(id)?
        .ok_or_else(|| Error::SessionNotFound(id.to_owned()))
}

/// A session as rights see it, with its ancestry read from the store.
pub fn facts<'a>(
    view: &dyn ReadTxn,
    s: &'a Session,
    chain: &'a mut Vec<String>,
) -> Result<SessionFacts<'a>> {
    *chain = ancestors(view, s.parent_session_id.as_deref())?;
    Ok(SessionFacts {
        session_id: &s.session_id,
        agent_id: &s.agent_id,
        ancestors: chain,
    })
}

/// Loads a session and checks that `caller` may do `action` to it.
pub fn authorize(view: &dyn ReadTxn, caller: &Caller, action: Action, id: &str) -> Result<Session> {
    let s = require_session(view, id)?;
    if !matches!(caller, Caller::Open) {
        let mut chain = Vec::new();
        access::check_session(caller, action, &facts(view, &s, &mut chain)?)?;
    }
    Ok(s)
}

/// A plan without requiring the session (an unknown one reads as empty).
pub fn plan_or_default(view: &dyn ReadTxn, session_id: &str) -> Result<PlanRecord> {
    Ok(view.plan(session_id)?.unwrap_or_else(|| PlanRecord {
        session_id: session_id.to_owned(),
        ..PlanRecord::default()
    }))
}

/// An agent's todo list; empty if never written.
pub fn get_todos(view: &dyn ReadTxn, agent_id: &str) -> Result<TodoRecord> {
    Ok(view.todos(agent_id)?.unwrap_or_else(|| TodoRecord {
        agent_id: agent_id.to_owned(),
        ..TodoRecord::default()
    }))
}

/// The ancestors of a session whose parent is `parent`: root first, parent
/// last. Stops at a missing session, and at a loop should the data ever hold
/// one, rather than spinning.
pub fn ancestors(view: &dyn ReadTxn, parent: Option<&str>) -> Result<Vec<String>> {
    let mut chain = Vec::new();
    let mut cursor = parent.map(str::to_owned);
    while let Some(id) = cursor {
        if chain.contains(&id) {
            break;
        }
        cursor = view.session(&id)?.and_then(|s| s.parent_session_id);
        chain.push(id);
    }
    chain.reverse();
    Ok(chain)
}

/// Refuses a tree deeper than the limit: every event carries its session's
/// ancestry, so depth multiplies the cost of every write below.
fn check_depth(limits: &Limits, depth: usize) -> Result<()> {
    Limits::check_count(
        "session.parent_session_id",
        "session tree depth",
        limits.max_tree_depth,
        depth,
    )
}

/// How many levels of descendants a session has (0 for a leaf), counting
/// no further than `cap` + 1.
fn levels_below(view: &dyn ReadTxn, id: &str, cap: usize) -> Result<usize> {
    let mut levels = 0;
    let mut frontier = vec![id.to_owned()];
    while levels <= cap {
        let mut next = Vec::new();
        for id in &frontier {
            next.extend(view.children(id)?);
        }
        if next.is_empty() {
            break;
        }
        levels += 1;
        frontier = next;
    }
    Ok(levels)
}

/// A session and all its descendants, pre-order (the session first).
pub fn subtree(view: &dyn ReadTxn, root: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(id) = stack.pop() {
        let mut kids = view.children(&id)?;
        kids.reverse();
        stack.extend(kids);
        out.push(id);
    }
    Ok(out)
}

/// One page of the sessions of the tree under `root`, in id order. The
/// tree is walked whole for each page: a page costs the tree's size.
pub fn list_tree(
    view: &dyn ReadTxn,
    root: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<SessionPage> {
    let mut ids = subtree(view, root)?;
    ids.retain(|id| after.is_none_or(|a| id.as_str() > a));
    ids.sort_unstable();
    let mut page = SessionPage::default();
    for id in &ids {
        if page.sessions.len() == limit {
            page.next_after = page.sessions.last().map(|s| s.session_id.clone());
            break;
        }
        if let Some(s) = view.session(id)? {
            page.sessions.push(s);
        }
    }
    Ok(page)
}

/// One page of sessions, optionally only one parent's children or one
/// agent's sessions.
pub fn list_sessions(
    view: &dyn ReadTxn,
    after: Option<&str>,
    limit: usize,
    parent: Option<&str>,
    agent: Option<&str>,
    caller: &Caller,
) -> Result<SessionPage> {
    let mut page = SessionPage::default();
    // A principal scoped to trees sees an agent's sessions in them only:
    // agent ids may recur in other tenants' trees.
    let in_scope = |s: &Session| -> Result<bool> {
        if matches!(caller, Caller::Principal(p) if !p.reads_everything()) {
            let mut chain = Vec::new();
            let f = facts(view, s, &mut chain)?;
            return Ok(access::check_session(caller, access::Action::Read, &f).is_ok());
        }
        Ok(true)
    };
    if let Some(parent) = parent {
        let ids = view.children(parent)?;
        for id in ids
            .iter()
            .filter(|id| after.is_none_or(|a| id.as_str() > a))
        {
            if page.sessions.len() == limit {
                page.next_after = page.sessions.last().map(|s| s.session_id.clone());
                break;
            }
            if let Some(s) = view.session(id)?
                && agent.is_none_or(|a| s.agent_id == a)
            {
                page.sessions.push(s);
            }
        }
        return Ok(page);
    }
    let mut cursor = after.map(str::to_owned);
    loop {
        let chunk = view.sessions_after(cursor.as_deref(), limit.max(1))?;
        let exhausted = chunk.next_after.is_none();
        for s in chunk.sessions {
            cursor = Some(s.session_id.clone());
            if agent.is_some_and(|a| s.agent_id != a) || !in_scope(&s)? {
                continue;
            }
            if page.sessions.len() == limit {
                page.next_after = page.sessions.last().map(|s| s.session_id.clone());
                return Ok(page);
            }
            page.sessions.push(s);
        }
        if exhausted {
            return Ok(page);
        }
    }
}

/// `CreateSession`.
fn create_session(
    ctx: &mut Ctx<'_>,
    mut s: Session,
    limits: &Limits,
    caller: &Caller,
) -> Result<(Session, u64)> {
    session::validate(&s, limits)?;
    let parent = match &s.parent_session_id {
        Some(id) => {
            let Some(parent) = ctx.txn.session(id)? else {
                // A caller that could not create under this parent if it
                // existed gets the same refusal as for a foreign one: the
                // answer must not tell whether another tenant's session
                // exists.
                let unknown = SessionFacts {
                    session_id: id,
                    agent_id: "",
                    ancestors: &[],
                };
                access::check_create(caller, &s.session_id, &s.agent_id, Some(&unknown))?;
                return Err(Error::ParentNotFound(id.clone()));
            };
            Some(parent)
        }
        None => None,
    };
    let mut parent_chain = Vec::new();
    let parent_facts = match &parent {
        Some(p) => Some(facts(ctx.txn, p, &mut parent_chain)?),
        None => None,
    };
    access::check_create(caller, &s.session_id, &s.agent_id, parent_facts.as_ref())?;
    if ctx.txn.session(&s.session_id)?.is_some() {
        return Err(Error::SessionExists(s.session_id));
    }
    let chain = ancestors(ctx.txn, s.parent_session_id.as_deref())?;
    check_depth(limits, chain.len() + 1)?;
    s.create_time = ctx.now;
    s.update_time = ctx.now;
    s.revision = ctx.next_revision();
    ctx.txn.put_session(&s)?;
    if let Some(parent) = &s.parent_session_id {
        ctx.txn.put_child(parent, &s.session_id)?;
    }
    if !s.agent_id.is_empty() {
        ctx.txn.put_agent_session(&s.agent_id, &s.session_id)?;
    }
    let rev = ctx.commit(vec![Event::session(EventKind::SessionCreated, &s, chain)])?;
    Ok((s, rev))
}

/// `UpdateSession`, including moves within the tree.
fn update_session(
    ctx: &mut Ctx<'_>,
    id: &str,
    patch: SessionPatch,
    limits: &Limits,
    caller: &Caller,
) -> Result<(Session, u64)> {
    limits.check_resource_id("session_id", id)?;
    let old = authorize(ctx.txn, caller, Action::Manage, id)?;
    check_expected_revision(patch.expected_revision, old.revision)?;
    let mut s = old.clone();
    if let Some(t) = patch.title {
        s.title = t;
    }
    if let Some(a) = patch.agent_id {
        s.agent_id = a;
    }
    if let Some(l) = patch.labels {
        s.labels = l;
    }
    if let Some(p) = patch.parent_session_id {
        s.parent_session_id = p.filter(|p| !p.is_empty());
    }
    session::validate(&s, limits)?;
    if s.parent_session_id != old.parent_session_id
        && let Some(parent) = &s.parent_session_id
    {
        // Walk up from the new parent: meeting `id` means a cycle.
        let mut cursor = Some(parent.clone());
        while let Some(c) = cursor {
            if c == id {
                return Err(Error::ParentCycle {
                    session: id.to_owned(),
                    parent: parent.clone(),
                });
            }
            cursor = match ctx.txn.session(&c)? {
                Some(p) => p.parent_session_id,
                None if c == *parent => return Err(Error::ParentNotFound(parent.clone())),
                None => None,
            };
        }
    }
    if s.parent_session_id != old.parent_session_id && !matches!(caller, Caller::Open) {
        let mut chain = Vec::new();
        let here = facts(ctx.txn, &old, &mut chain)?;
        let new_parent = match &s.parent_session_id {
            Some(p) => ctx.txn.session(p)?,
            None => None,
        };
        let mut parent_chain = Vec::new();
        let landing = match &new_parent {
            Some(p) => Some(facts(ctx.txn, p, &mut parent_chain)?),
            None => None,
        };
        access::check_move(caller, &here, landing.as_ref())?;
    }
    if s.parent_session_id != old.parent_session_id {
        // The moved session's new depth, plus the levels below it.
        let depth = ancestors(ctx.txn, s.parent_session_id.as_deref())?.len() + 1;
        let below = levels_below(ctx.txn, id, limits.max_tree_depth)?;
        check_depth(limits, depth + below)?;
    }
    if s == old {
        return Ok((old, ctx.revision()));
    }
    s.update_time = ctx.now;
    s.revision = ctx.next_revision();
    let previous = ancestors(ctx.txn, old.parent_session_id.as_deref())?;
    let mut event = Event::session(
        EventKind::SessionUpdated,
        &s,
        ancestors(ctx.txn, s.parent_session_id.as_deref())?,
    );
    if s.parent_session_id != old.parent_session_id {
        event.previous_parent_session_id = old.parent_session_id.clone().unwrap_or_default();
        event.previous_ancestors = previous;
        event.moved = true;
    }
    if s.agent_id != old.agent_id {
        event.previous_agent_id.clone_from(&old.agent_id);
        if !old.agent_id.is_empty() {
            ctx.txn.delete_agent_session(&old.agent_id, id)?;
        }
        if !s.agent_id.is_empty() {
            ctx.txn.put_agent_session(&s.agent_id, id)?;
        }
    }
    if s.parent_session_id != old.parent_session_id {
        if let Some(p) = &old.parent_session_id {
            ctx.txn.delete_child(p, id)?;
        }
        if let Some(p) = &s.parent_session_id {
            ctx.txn.put_child(p, id)?;
        }
    }
    ctx.txn.put_session(&s)?;
    let mut events = vec![event];
    if s.parent_session_id != old.parent_session_id {
        events.extend(moved_waits(ctx.txn, &s, &event_chains(&events[0]))?);
    }
    let rev = ctx.commit(events)?;
    Ok((s, rev))
}

/// A moved session's ancestors before and after the move.
fn event_chains(e: &Event) -> (Vec<String>, Vec<String>) {
    (e.previous_ancestors.clone(), e.ancestors.clone())
}

/// A move changes who may decide on what waits in the moved subtree: each
/// waiting item leaves the inboxes of the tree it was in (a removal with
/// its ancestors before) and joins those of the tree it is in now (an
/// addition with the new ones). Both are marked `moved`: nothing was
/// asked or decided, so webhooks ignore them. Read after the move is
/// written, so each session's ancestors are the new ones.
fn moved_waits(
    txn: &dyn ReadTxn,
    root: &Session,
    (before, after): &(Vec<String>, Vec<String>),
) -> Result<Vec<Event>> {
    let mut out = Vec::new();
    for sid in subtree(txn, &root.session_id)? {
        let Some(record) = txn.plan(&sid)? else {
            continue;
        };
        let waiting = record.plan.mode.awaiting(&sid);
        if waiting.is_empty() {
            continue;
        }
        let Some(session) = txn.session(&sid)? else {
            continue;
        };
        let now = ancestors(txn, session.parent_session_id.as_deref())?;
        // Below the moved session nothing moved: the old chain is the old
        // one of the moved session, then the same path down.
        let below = now.get(after.len()..).unwrap_or_default();
        let then: Vec<String> = before.iter().chain(below).cloned().collect();
        for key in waiting {
            let Some(item) = InboxItem::of(session.clone(), &record.plan.mode, key) else {
                continue;
            };
            let mut gone = Event::inbox(EventKind::InboxRemoved, item.clone(), then.clone());
            if sid == root.session_id {
                gone.parent_session_id = then.last().cloned().unwrap_or_default();
            }
            if let EventObject::Inbox(i) = &mut gone.object {
                i.resolution = Some(Resolution {
                    decision: Decided::Withdrawn,
                    by: String::new(),
                    reason: String::new(),
                });
            }
            gone.moved = true;
            let mut joined = Event::inbox(EventKind::InboxAdded, item, now.clone());
            joined.moved = true;
            out.extend([gone, joined]);
        }
    }
    Ok(out)
}

/// A lease write: `KeepAlive` taking or releasing the lease, or the
/// server's own transition. A write that would change nothing writes
/// nothing, and answers with the session as it is.
fn lease(
    ctx: &mut Ctx<'_>,
    id: &str,
    op: &LeaseOp,
    caller: &Caller,
    limits: &Limits,
) -> Result<(Session, u64)> {
    limits.check_resource_id("session_id", id)?;
    let old = match op {
        LeaseOp::Hold { .. } | LeaseOp::Release { .. } => {
            authorize(ctx.txn, caller, Action::WritePlan, id)?
        }
        LeaseOp::Mark { .. } => require_session(ctx.txn, id)?,
    };
    let next = match (op, &old.lease) {
        (
            LeaseOp::Hold {
                ttl_ms,
                grace_ms,
                holder,
            },
            current,
        ) => {
            liveness::validate(*ttl_ms, *grace_ms)?;
            match current {
                Some(l) if !l.keep_alive_writes(*ttl_ms, *grace_ms, holder) => None,
                _ => Some(Lease::held(*ttl_ms, *grace_ms, holder, ctx.now)),
            }
        }
        (LeaseOp::Release { .. }, Some(l)) if l.state != Liveness::Finished => Some(Lease {
            state: Liveness::Finished,
            since: ctx.now,
            last_seen: ctx.now,
            ..l.clone()
        }),
        (
            LeaseOp::Release {
                ttl_ms,
                grace_ms,
                holder,
            },
            None,
        ) => Some(Lease {
            state: Liveness::Finished,
            ..Lease::held(*ttl_ms, *grace_ms, holder, ctx.now)
        }),
        (
            LeaseOp::Mark {
                to,
                expected_revision,
                last_seen,
            },
            Some(l),
        ) if old.revision == *expected_revision && l.state != *to => Some(Lease {
            state: *to,
            since: ctx.now,
            last_seen: *last_seen,
            ..l.clone()
        }),
        // Already finished. Or, for a transition: another server decided
        // first, or the session changed since, and the deciding server
        // looks again from the new state.
        (LeaseOp::Release { .. } | LeaseOp::Mark { .. }, _) => None,
    };
    let Some(next) = next else {
        return Ok((old, ctx.revision()));
    };
    let mut s = old;
    if s.lease.is_none() {
        ctx.txn.put_leased(id)?;
    }
    s.lease = Some(next);
    s.update_time = ctx.now;
    s.revision = ctx.next_revision();
    ctx.txn.put_session(&s)?;
    let chain = ancestors(ctx.txn, s.parent_session_id.as_deref())?;
    let rev = ctx.commit(vec![Event::session(EventKind::SessionUpdated, &s, chain)])?;
    Ok((s, rev))
}

/// A webhook command with what only the sessions can say about a task's
/// push config: its session authorized for the caller (whoever manages
/// it), and on creation the task's state now, from which it is told.
/// [`crate::webhooks::apply`] takes such a command as authorized.
fn task_push_checked(
    ctx: &mut Ctx<'_>,
    caller: &Caller,
    c: &WebhookCommand,
) -> Result<WebhookCommand> {
    match c {
        WebhookCommand::Create(w) => {
            let mut w = w.clone();
            if let Some(push) = w.task.as_mut() {
                let session = authorize(ctx.txn, caller, Action::Manage, &push.task_id)?;
                let plan = plan_or_default(ctx.txn, &push.task_id)?;
                let liveness = session.lease.as_ref().map(|l| l.state);
                push.state = Some(task_state(&plan.plan, liveness));
            }
            Ok(WebhookCommand::Create(w))
        }
        WebhookCommand::Delete { webhook_id } => {
            if let Some(task) = TaskPush::task_of(webhook_id) {
                authorize(ctx.txn, caller, Action::Manage, task)?;
            }
            Ok(c.clone())
        }
        WebhookCommand::Retry { .. } => Ok(c.clone()),
    }
}

/// `DeleteSession`: the session (and with `cascade`, its subtree) with plans
/// and history, in one revision. Returns the deleted ids, requested first.
fn delete_session(
    ctx: &mut Ctx<'_>,
    id: &str,
    cascade: bool,
    expected: Option<u64>,
    limits: &Limits,
    caller: &Caller,
) -> Result<(Vec<String>, u64)> {
    limits.check_resource_id("session_id", id)?;
    // The subtree lies in the caller's scope when its root does.
    let root = authorize(ctx.txn, caller, Action::Manage, id)?;
    check_expected_revision(expected, root.revision)?;
    let kids = ctx.txn.children(id)?;
    if !kids.is_empty() && !cascade {
        return Err(Error::SessionHasChildren {
            session: id.to_owned(),
            children: kids.len(),
        });
    }
    let ids = subtree(ctx.txn, id)?;
    // Ancestry is read before anything is deleted; pre-order means a
    // parent's chain is known before its children's.
    let mut chains: HashMap<String, Vec<String>> = HashMap::new();
    let mut doomed = Vec::with_capacity(ids.len());
    for sid in &ids {
        let Some(s) = ctx.txn.session(sid)? else {
            continue;
        };
        let chain = match s
            .parent_session_id
            .as_deref()
            .and_then(|p| chains.get(p).map(|c| (p, c)))
        {
            Some((p, c)) => {
                let mut c = c.clone();
                c.push(p.to_owned());
                c
            }
            None => ancestors(ctx.txn, s.parent_session_id.as_deref())?,
        };
        chains.insert(sid.clone(), chain.clone());
        doomed.push((s, chain));
    }
    let mut events = Vec::with_capacity(doomed.len());
    for (s, chain) in doomed {
        let sid = s.session_id.as_str();
        if let Some(p) = ctx.txn.plan(sid)? {
            let mut waits = waits_changed(&s, &p.plan.mode, &PlanModeState::default(), &chain);
            resolve(&mut waits, |_| Resolution {
                decision: Decided::Withdrawn,
                by: String::new(),
                reason: String::new(),
            });
            index_waits(ctx, &waits)?;
            events.extend(waits);
        }
        ctx.txn.delete_session(sid)?;
        ctx.txn.delete_plan(sid)?;
        ctx.txn.delete_history(sid)?;
        crate::webhooks::forget_task(ctx, sid)?;
        if let Some(p) = &s.parent_session_id {
            ctx.txn.delete_child(p, sid)?;
        }
        if !s.agent_id.is_empty() {
            ctx.txn.delete_agent_session(&s.agent_id, sid)?;
        }
        if s.lease.is_some() {
            ctx.txn.delete_leased(sid)?;
        }
        events.push(Event::session(EventKind::SessionDeleted, &s, chain));
    }
    let rev = ctx.commit(events)?;
    Ok((ids, rev))
}

/// Says on each removal among `waits` how it stopped waiting.
fn resolve(waits: &mut [Event], how: impl Fn(&InboxItem) -> Resolution) {
    for e in waits {
        if let EventObject::Inbox(item) = &mut e.object
            && e.kind == EventKind::InboxRemoved
        {
            item.resolution = Some(how(item));
        }
    }
}

/// How `command` ended the wait of `item` (a removal it caused).
fn resolution(command: &PlanCommand, item: &InboxItem, caller: &Caller) -> Resolution {
    let by = access::submitter_id(caller);
    let decided = |decision, by, reason| Resolution {
        decision,
        by,
        reason,
    };
    match (command, item.key.item) {
        (PlanCommand::Approve { approver }, Awaited::Plan) => decided(
            Decided::Approved,
            access::approver_id(caller, approver.clone()),
            String::new(),
        ),
        (PlanCommand::Reject { reason }, Awaited::Plan) => {
            decided(Decided::Rejected, by, reason.clone())
        }
        (
            PlanCommand::DecideModification {
                modification_id,
                decision,
            },
            Awaited::Modification(id),
        ) if *modification_id == id => {
            let d = match decision {
                Decision::Approve => Decided::Approved,
                Decision::Reject => Decided::Rejected,
            };
            decided(d, by, String::new())
        }
        (PlanCommand::Deadline { item: passed, .. }, waited) if *passed == waited => decided(
            Decided::Rejected,
            DEADLINE_PRINCIPAL.to_owned(),
            item.deadline
                .as_ref()
                .map(Deadline::reason)
                .unwrap_or_default(),
        ),
        _ => decided(Decided::Withdrawn, String::new(), String::new()),
    }
}

/// Who a deadline's rejection is recorded as.
pub const DEADLINE_PRINCIPAL: &str = "cairn:deadline";

/// Keeps the inbox index in step with one session's waiting items, in the
/// revision that changes them.
/// The items of `session` that stop and start waiting for approval when
/// its plan-mode state goes from `before` to `after`, as the events inbox
/// watchers get (pure: [`index_waits`] writes them).
fn waits_changed(
    session: &Session,
    before: &PlanModeState,
    after: &PlanModeState,
    chain: &[String],
) -> Vec<Event> {
    let id = &session.session_id;
    let (gone, new) = inbox::changes(&before.awaiting(id), &after.awaiting(id));
    let removed = gone.into_iter().filter_map(|k| {
        InboxItem::of(session.clone(), before, k)
            .map(|i| Event::inbox(EventKind::InboxRemoved, i, chain.to_vec()))
    });
    // An item that waits on with another deadline (escalated) is added
    // again: watchers and the deadline index take an addition as the
    // item's latest state.
    let changed = after
        .awaiting(id)
        .into_iter()
        .filter(|k| !new.contains(k) && before.deadline_of(k.item) != after.deadline_of(k.item));
    let added = new.iter().cloned().chain(changed).filter_map(|k| {
        InboxItem::of(session.clone(), after, k)
            .map(|i| Event::inbox(EventKind::InboxAdded, i, chain.to_vec()))
    });
    removed.chain(added).collect()
}

/// Keeps the inbox index in step with `waits` (from [`waits_changed`]), in
/// the revision that changes them.
fn index_waits(ctx: &mut Ctx<'_>, waits: &[Event]) -> Result<()> {
    for e in waits {
        if let EventObject::Inbox(item) = &e.object {
            if e.kind == EventKind::InboxAdded {
                ctx.txn.put_awaiting(&item.key)?;
            } else {
                ctx.txn.delete_awaiting(&item.key)?;
            }
        }
    }
    Ok(())
}

/// What a command changed, besides the revision.
#[derive(Debug, Clone)]
pub enum Applied {
    /// A plan command: the stored plan and what the rule yielded.
    Plan {
        record: Box<PlanRecord>,
        outcome: PlanOutcome,
    },
    /// A created or updated session.
    Session(Session),
    /// Deleted sessions: the requested one first, then its subtree.
    Deleted(Vec<String>),
    /// An agent's todo list as stored.
    Todos(TodoRecord),
    /// A created principal, or one with a new token.
    Principal(PrincipalRecord),
    /// A deleted principal.
    PrincipalDeleted,
    /// A webhook subscription changed.
    Webhook,
}

impl Applied {
    /// What a plan command stored and yielded.
    pub fn into_plan(self) -> Result<(PlanRecord, PlanOutcome)> {
        match self {
            Applied::Plan { record, outcome } => Ok((*record, outcome)),
            other => Err(other.mismatch("a plan")),
        }
    }

    /// The session a create or an update left.
    pub fn into_session(self) -> Result<Session> {
        match self {
            Applied::Session(s) => Ok(s),
            other => Err(other.mismatch("a session")),
        }
    }

    /// The ids a delete removed.
    pub fn into_deleted(self) -> Result<Vec<String>> {
        match self {
            Applied::Deleted(ids) => Ok(ids),
            other => Err(other.mismatch("deleted sessions")),
        }
    }

    /// The todo list a write left.
    pub fn into_todos(self) -> Result<TodoRecord> {
        match self {
            Applied::Todos(t) => Ok(t),
            other => Err(other.mismatch("a todo list")),
        }
    }

    /// The principal a create or a rotation left.
    pub fn into_principal(self) -> Result<PrincipalRecord> {
        match self {
            Applied::Principal(p) => Ok(p),
            other => Err(other.mismatch("a principal")),
        }
    }

    /// A command answered with what another kind of command yields: a bug
    /// in the caller's pairing of command and answer, never the input's.
    fn mismatch(&self, wanted: &str) -> Error {
        let got = match self {
            Applied::Plan { .. } => "a plan",
            Applied::Session(_) => "a session",
            Applied::Deleted(_) => "deleted sessions",
            Applied::Todos(_) => "a todo list",
            Applied::Principal(_) => "a principal",
            Applied::PrincipalDeleted => "a deleted principal",
            Applied::Webhook => "a webhook change",
        };
        Error::Internal(format!("expected {wanted} from a command, got {got}"))
    }
}

/// Applies `command` on behalf of `caller`: the one write path of every
/// RPC, the dashboard and anything the server does on its own. Returns
/// what changed and the revision of the commit.
pub fn apply(
    ctx: &mut Ctx<'_>,
    caller: &Caller,
    command: &Command,
    limits: &Limits,
) -> Result<(Applied, u64)> {
    match command {
        Command::Plan(w) => plan(ctx, caller, w, limits),
        Command::Session(SessionCommand::Create(s)) => {
            let (s, rev) = create_session(ctx, s.clone(), limits, caller)?;
            Ok((Applied::Session(s), rev))
        }
        Command::Session(SessionCommand::Update { session_id, patch }) => {
            let (s, rev) = update_session(ctx, session_id, patch.clone(), limits, caller)?;
            Ok((Applied::Session(s), rev))
        }
        Command::Session(SessionCommand::Lease { session_id, op }) => {
            let (s, rev) = lease(ctx, session_id, op, caller, limits)?;
            Ok((Applied::Session(s), rev))
        }
        Command::Session(SessionCommand::Delete {
            session_id,
            cascade,
            expected_revision,
        }) => {
            let (ids, rev) = delete_session(
                ctx,
                session_id,
                *cascade,
                *expected_revision,
                limits,
                caller,
            )?;
            Ok((Applied::Deleted(ids), rev))
        }
        Command::Todos(TodoCommand::Write {
            agent_id,
            items,
            expected_revision,
        }) => {
            limits.check_resource_id("agent_id", agent_id)?;
            access::check_todos(caller, agent_id, access::TodoAction::Write)?;
            let (list, rev) =
                write_todos(ctx, agent_id, items.clone(), *expected_revision, limits)?;
            Ok((Applied::Todos(list), rev))
        }
        Command::Webhook(c) => {
            let c = task_push_checked(ctx, caller, c)?;
            Ok((Applied::Webhook, crate::webhooks::apply(ctx, caller, &c)?))
        }
        Command::Principal(c) => {
            access::check_admin(caller)?;
            match c {
                PrincipalCommand::Create {
                    principal,
                    token_sha256,
                } => {
                    access::check_new_principal(principal, limits)?;
                    let record = PrincipalRecord {
                        principal: principal.clone(),
                        token_sha256: token_sha256.clone(),
                        ..PrincipalRecord::default()
                    };
                    let (p, rev) = create_principal(ctx, record)?;
                    Ok((Applied::Principal(p), rev))
                }
                PrincipalCommand::Delete {
                    principal_id,
                    expected_revision,
                } => {
                    limits.check_resource_id("principal_id", principal_id)?;
                    let rev = delete_principal(ctx, principal_id, *expected_revision)?;
                    Ok((Applied::PrincipalDeleted, rev))
                }
                PrincipalCommand::RotateToken {
                    principal_id,
                    token_sha256,
                } => {
                    limits.check_resource_id("principal_id", principal_id)?;
                    let (p, rev) = rotate_token(ctx, principal_id, token_sha256)?;
                    Ok((Applied::Principal(p), rev))
                }
            }
        }
    }
}

/// A session as a plan write finds it: its facts and its plan.
struct Loaded {
    session: Session,
    ancestors: Vec<String>,
    record: PlanRecord,
}

/// Loads a session's facts and plan: from memory when the engine has
/// them (no reads, no decoding), else from the transaction.
fn load(ctx: &Ctx<'_>, session_id: &str) -> Result<Option<Loaded>> {
    if let Some(hot) = ctx.txn.hot_plan(session_id)? {
        // What events and rights need of the session: its agent and place.
        return Ok(Some(Loaded {
            session: Session {
                session_id: session_id.to_owned(),
                agent_id: hot.agent_id.clone(),
                parent_session_id: hot.ancestors.last().cloned(),
                ..Session::default()
            },
            ancestors: hot.ancestors.clone(),
            record: hot.record.clone(),
        }));
    }
    let Some(session) = ctx.txn.session(session_id)? else {
        return Ok(None);
    };
    Ok(Some(Loaded {
        ancestors: ancestors(ctx.txn, session.parent_session_id.as_deref())?,
        record: plan_or_default(ctx.txn, session_id)?,
        session,
    }))
}

/// A plan write, in five steps: load the session's facts, check access,
/// check `expected_revision`, run the rule, then encode, store and log.
fn plan(
    ctx: &mut Ctx<'_>,
    caller: &Caller,
    w: &PlanWrite,
    limits: &Limits,
) -> Result<(Applied, u64)> {
    let PlanWrite {
        session_id,
        expected_revision,
        command,
    } = w;
    limits.check_resource_id("session_id", session_id)?;
    // 1 and 2: the facts, then access, once.
    let (
        Loaded {
            session,
            ancestors: chain,
            mut record,
        },
        created,
    ) = match load(ctx, session_id)? {
        Some(loaded) => {
            access::check_session(
                caller,
                command.action(),
                &SessionFacts {
                    session_id,
                    agent_id: &loaded.session.agent_id,
                    ancestors: &loaded.ancestors,
                },
            )?;
            (loaded, false)
        }
        None if command.creates_session() => {
            let agent_id = new_session_agent(caller);
            access::check_create(caller, session_id, &agent_id, None)?;
            let session = Session {
                session_id: session_id.clone(),
                agent_id,
                create_time: ctx.now,
                update_time: ctx.now,
                revision: ctx.next_revision(),
                ..Session::default()
            };
            let record = PlanRecord {
                session_id: session_id.clone(),
                ..PlanRecord::default()
            };
            let loaded = Loaded {
                session,
                ancestors: Vec::new(),
                record,
            };
            (loaded, true)
        }
        None => {
            // An unknown session is a session in NORMAL mode with no plan:
            // answer with the rule's own error (e.g. "Not in plan mode"),
            // which is what an agent can act on, and create nothing.
            command.run(&mut SessionPlan::default(), caller, ctx.now, limits)?;
            return Err(Error::SessionNotFound(session_id.clone()));
        }
    };
    // 3.
    check_expected_revision(*expected_revision, record.revision)?;
    // 4. The rule, on a copy.
    let mut plan = record.plan.clone();
    let (outcome, history) = command.run(&mut plan, caller, ctx.now, limits)?;
    let mut waits = waits_changed(&session, &record.plan.mode, &plan.mode, &chain);
    resolve(&mut waits, |item| resolution(command, item, caller));
    // 5.
    let history_from = record.history_len;
    record.history_len += history.len() as u64;
    record.plan = plan;
    record.revision = ctx.next_revision();
    record.update_time = ctx.now;
    // Every later change rewrites and logs the whole record: bound it,
    // before anything is written.
    let (encoded, size) = crate::codec::encode_sized(&record)?;
    Limits::check_count(
        "plan",
        "stored plan size in bytes",
        limits.max_plan_bytes,
        size,
    )?;
    let mut events = Vec::with_capacity(2);
    if created {
        ctx.txn.put_session(&session)?;
        if !session.agent_id.is_empty() {
            ctx.txn.put_agent_session(&session.agent_id, session_id)?;
        }
        events.push(Event::session(
            EventKind::SessionCreated,
            &session,
            chain.clone(),
        ));
    }
    for (seq, entry) in (history_from..).zip(&history) {
        ctx.txn.put_history(session_id, seq, entry)?;
    }
    ctx.txn.put_plan(session_id, &encoded)?;
    index_waits(ctx, &waits)?;
    let mut event = Event::plan(&session, &record, chain);
    event.closed = history.last().map(|h| h.outcome);
    events.push(event);
    events.extend(waits);
    let rev = ctx.commit(events)?;
    Ok((
        Applied::Plan {
            record: Box::new(record),
            outcome,
        },
        rev,
    ))
}

/// The agent of a session a plan mutation creates: the caller's, when it
/// is an agent acting as exactly one (so that it can use the session it
/// made); otherwise none.
fn new_session_agent(caller: &Caller) -> String {
    match caller {
        Caller::Principal(p)
            if p.has(Role::Agent)
                && !p.has(Role::Orchestrator)
                && !p.has(Role::Admin)
                && p.agent_ids.len() == 1 =>
        {
            p.agent_ids.iter().next().cloned().unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// `WriteTodos`: validate and merge, then store.
fn write_todos(
    ctx: &mut Ctx<'_>,
    agent_id: &str,
    items: Vec<TodoInput>,
    expected: Option<u64>,
    limits: &Limits,
) -> Result<(TodoRecord, u64)> {
    limits.check_resource_id("agent_id", agent_id)?;
    let mut record = get_todos(ctx.txn, agent_id)?;
    check_expected_revision(expected, record.revision)?;
    record.items = todo::write(&record.items, items, ctx.now, limits)?;
    record.revision = ctx.next_revision();
    record.update_time = ctx.now;
    ctx.txn.put_todos(&record)?;
    let rev = ctx.commit(vec![Event::todos(&record)])?;
    Ok((record, rev))
}

/// `CreatePrincipal`: a new principal with the hash of its token.
fn create_principal(ctx: &mut Ctx<'_>, mut p: PrincipalRecord) -> Result<(PrincipalRecord, u64)> {
    let id = p.principal.principal_id.clone();
    if ctx.txn.principal(&id)?.is_some() {
        return Err(Error::PrincipalExists(id));
    }
    // An agent id belongs to one tenant: whoever else holds it must have
    // the same trees.
    if !p.principal.agent_ids.is_empty() {
        let mut after: Option<String> = None;
        loop {
            let page = ctx.txn.principals_after(after.as_deref(), 256)?;
            for other in &page {
                let theirs = &other.principal;
                if theirs.session_roots == p.principal.session_roots {
                    continue;
                }
                if let Some(agent) = theirs.agent_ids.intersection(&p.principal.agent_ids).next() {
                    return Err(Error::AgentIdTaken {
                        agent_id: agent.clone(),
                        principal_id: theirs.principal_id.clone(),
                    });
                }
            }
            match page.last() {
                Some(last) if page.len() == 256 => {
                    after = Some(last.principal.principal_id.clone());
                }
                _ => break,
            }
        }
    }
    p.create_time = ctx.now;
    p.revision = ctx.next_revision();
    ctx.txn.put_principal(&p)?;
    let rev = ctx.commit(vec![Event::principal(&id)])?;
    Ok((p, rev))
}

/// `DeletePrincipal`: the principal and its token go; its open watches end.
fn delete_principal(ctx: &mut Ctx<'_>, id: &str, expected: Option<u64>) -> Result<u64> {
    let p = ctx
        .txn
        .principal(id)?
        .ok_or_else(|| Error::PrincipalNotFound(id.to_owned()))?;
    check_expected_revision(expected, p.revision)?;
    ctx.txn.delete_principal(&p)?;
    ctx.commit(vec![Event::principal(id)])
}

/// `RotateToken`: the old token stops working in the same commit.
fn rotate_token(ctx: &mut Ctx<'_>, id: &str, token_sha256: &str) -> Result<(PrincipalRecord, u64)> {
    let mut p = ctx
        .txn
        .principal(id)?
        .ok_or_else(|| Error::PrincipalNotFound(id.to_owned()))?;
    token_sha256.clone_into(&mut p.token_sha256);
    p.revision = ctx.next_revision();
    ctx.txn.put_principal(&p)?;
    let rev = ctx.commit(vec![Event::principal(id)])?;
    Ok((p, rev))
}
