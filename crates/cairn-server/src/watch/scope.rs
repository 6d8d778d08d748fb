//! What one caller may see of a watch stream, decided at each event's
//! revision, not only when the stream starts.
//!
//! A target is authorized when the stream opens; its events then still
//! pass through the caller's rights one by one. An event of a session the
//! caller may not read at that revision is left out; a session that
//! leaves the caller's scope (handed to another agent, moved into another
//! tree) arrives as its deletion, so a client's view never keeps what it
//! may no longer read. Events left out of a revision renumber the rest,
//! so `index_in_revision`/`events_in_revision` stay whole for resuming.

use cairn_core::access::{self, Action, Caller, SessionFacts};
use cairn_core::error::Result;
use cairn_store::hub::Topic;
use cairn_store::records::{Event, EventKind, EventObject};
use tokio_stream::{Stream, StreamExt};

use super::stream::{Delivered, Item};

/// A caller whose rights may hide events; `None` from [`Scope::of`] when
/// nothing can be hidden (authentication off, an admin).
#[derive(Debug, Clone)]
pub struct Scope {
    caller: Caller,
}

impl Scope {
    /// The scope of `caller` on `topic`, if it can hide anything: on the
    /// inbox, every principal's (an admin too decides on nothing it
    /// submitted itself).
    pub fn on(caller: &Caller, topic: &Topic) -> Option<Scope> {
        match (caller, topic) {
            (Caller::Principal(_), Topic::Inbox) => Some(Scope {
                caller: caller.clone(),
            }),
            _ => Scope::of(caller),
        }
    }

    /// The scope of `caller`, if it can hide anything.
    pub fn of(caller: &Caller) -> Option<Scope> {
        match caller {
            Caller::Open => None,
            Caller::Principal(p) if p.has(access::Role::Admin) => None,
            Caller::Principal(_) => Some(Scope {
                caller: caller.clone(),
            }),
        }
    }

    fn reads(&self, session_id: &str, agent_id: &str, ancestors: &[String]) -> bool {
        let facts = SessionFacts {
            session_id,
            agent_id,
            ancestors,
        };
        access::check_session(&self.caller, Action::Read, &facts).is_ok()
    }

    /// An inbox event, if the caller may decide on its item at its
    /// revision and did not submit it.
    fn approves(&self, e: &Event) -> Option<Event> {
        let EventObject::Inbox(item) = &e.object else {
            return None;
        };
        let facts = SessionFacts {
            session_id: &e.session_id,
            agent_id: &e.agent_id,
            ancestors: &e.ancestors,
        };
        (access::check_session(&self.caller, Action::Approve, &facts).is_ok()
            && !item.is_own(&self.caller))
        .then(|| e.clone())
    }

    /// The event as this caller gets it: itself, its session's deletion
    /// (the session left the caller's scope), or nothing.
    pub fn see(&self, e: &Event) -> Option<Event> {
        match e.kind {
            EventKind::PrincipalChanged => return None,
            EventKind::InboxAdded | EventKind::InboxRemoved => return self.approves(e),
            EventKind::TodosUpdated | EventKind::TodosCleared => {
                return access::check_todos(&self.caller, &e.agent_id, access::TodoAction::Read)
                    .is_ok()
                    .then(|| e.clone());
            }
            EventKind::SessionCreated
            | EventKind::SessionUpdated
            | EventKind::SessionDeleted
            | EventKind::PlanUpdated => {}
        }
        if self.reads(&e.session_id, &e.agent_id, &e.ancestors) {
            return Some(e.clone());
        }
        let changed_agent = !e.previous_agent_id.is_empty();
        if e.kind != EventKind::SessionUpdated || !(changed_agent || e.moved) {
            return None;
        }
        let agent = if changed_agent {
            &e.previous_agent_id
        } else {
            &e.agent_id
        };
        let (parent, ancestors) = if e.moved {
            (&e.previous_parent_session_id, &e.previous_ancestors)
        } else {
            (&e.parent_session_id, &e.ancestors)
        };
        if !self.reads(&e.session_id, agent, ancestors) {
            return None;
        }
        // Gone for this caller: its last state as the caller knew it,
        // without what changed (that is outside its scope now).
        let EventObject::Session(s) = &e.object else {
            return None;
        };
        let mut last = s.clone();
        last.agent_id.clone_from(agent);
        last.parent_session_id = (!parent.is_empty()).then(|| parent.clone());
        last.title.clear();
        last.labels.clear();
        Some(Event {
            kind: EventKind::SessionDeleted,
            object: EventObject::Session(last),
            session_id: e.session_id.clone(),
            parent_session_id: parent.clone(),
            agent_id: agent.clone(),
            ancestors: ancestors.clone(),
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        })
    }

    /// One revision's events (all of them, in order) as this caller gets
    /// them, renumbered.
    fn revision(&self, delivered: &[Delivered]) -> Vec<Item> {
        let seen: Vec<(u64, Event)> = delivered
            .iter()
            .filter_map(|d| self.see(&d.event).map(|e| (d.revision, e)))
            .collect();
        let count = u32::try_from(seen.len()).unwrap_or(u32::MAX);
        seen.into_iter()
            .enumerate()
            .map(|(i, (revision, event))| {
                Item::Event(Delivered {
                    revision,
                    event,
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    count,
                })
            })
            .collect()
    }
}

/// `inner` as `scope` sees it (unchanged without a scope).
pub fn scoped(
    inner: impl Stream<Item = Result<Item>> + Send + 'static,
    scope: Option<Scope>,
) -> impl Stream<Item = Result<Item>> + Send + 'static {
    async_stream::stream! {
        tokio::pin!(inner);
        let Some(scope) = scope else {
            while let Some(item) = inner.next().await {
                yield item;
            }
            return;
        };
        // The events of the revision in progress (a revision is never
        // split by anything else, so it completes before the next item).
        let mut pending: Vec<Delivered> = Vec::new();
        while let Some(item) = inner.next().await {
            match item {
                Ok(Item::Event(d)) => {
                    let last = d.index + 1 >= d.count;
                    pending.push(d);
                    if last {
                        for item in scope.revision(&pending) {
                            yield Ok(item);
                        }
                        pending.clear();
                    }
                }
                other => yield other,
            }
        }
    }
}
