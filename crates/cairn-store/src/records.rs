//! What the store persists and what it publishes.
//!
//! Records wrap domain structs with the revision and time of their last
//! change. Events carry the full new object (never a diff) so a watcher
//! that joins late needs nothing but the event itself.

use serde::{Deserialize, Serialize};

use cairn_core::access::{Caller, Principal};
use cairn_core::deadline::Deadline;
use cairn_core::inbox::{Awaited, Awaiting};
use cairn_core::plan_mode::{Modification, Outcome, PlanModeState};
use cairn_core::session::Session;
use cairn_core::todo::TodoItem;
use cairn_core::{Micros, SessionPlan};

/// A session's plan as stored and served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PlanRecord {
    pub session_id: String,
    pub plan: SessionPlan,
    /// Store revision of the last change; 0 when never written.
    pub revision: u64,
    /// 0 when never written.
    pub update_time: Micros,
    /// Number of history entries, so the next one gets a fresh key.
    #[serde(skip_serializing_if = "cairn_core::is_zero")]
    pub history_len: u64,
}

/// An agent's todo list as stored and served.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TodoRecord {
    pub agent_id: String,
    pub items: Vec<TodoItem>,
    /// Store revision of the last change; 0 when never written.
    pub revision: u64,
    /// 0 when never written.
    pub update_time: Micros,
}

/// A principal as stored: never its token, only the token's SHA-256.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PrincipalRecord {
    pub principal: Principal,
    /// Hex SHA-256 of the current token.
    pub token_sha256: String,
    pub create_time: Micros,
    /// Store revision of the last change.
    pub revision: u64,
}

/// One item awaiting approval: what `ListInbox` lists and an inbox event
/// carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxItem {
    pub key: Awaiting,
    pub session: Session,
    /// The plan-mode goal of the session.
    pub goal: String,
    /// The pending plan's id, or the active plan's for a modification.
    pub plan_id: String,
    /// The pending plan's summary.
    pub summary: String,
    /// The modification asked for, for a modification.
    pub modification: Option<Modification>,
    /// Who submitted it.
    pub submitted_by: String,
    /// What happens if nobody decides in time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
    /// On a removal: how it stopped waiting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution: Option<Resolution>,
}

/// How an item stopped waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decided {
    Approved,
    Rejected,
    /// Nobody decided: its plan completed or was superseded, or its
    /// session was deleted.
    Withdrawn,
}

/// Who decided on an item, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    pub decision: Decided,
    /// The deciding principal (empty with authentication off), or
    /// `cairn:deadline` for a deadline's rejection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl InboxItem {
    /// The item `key` names in a session's plan-mode state, if it still
    /// waits.
    pub fn of(session: Session, mode: &PlanModeState, key: Awaiting) -> Option<InboxItem> {
        let (plan_id, summary, modification, submitted_by) = match key.item {
            Awaited::Plan => {
                let p = mode.pending.as_ref()?;
                (
                    p.plan_id.clone(),
                    p.plan.summary.clone(),
                    None,
                    p.submitted_by.clone(),
                )
            }
            Awaited::Modification(id) => {
                let m = mode.modifications.iter().find(|m| m.id == id)?;
                let plan_id = mode
                    .active
                    .as_ref()
                    .map(|a| a.plan_id.clone())
                    .unwrap_or_default();
                (
                    plan_id,
                    String::new(),
                    Some(m.clone()),
                    m.submitted_by.clone(),
                )
            }
        };
        Some(InboxItem {
            resolution: None,
            deadline: mode.deadline_of(key.item).cloned(),
            key,
            goal: mode.goal.clone(),
            session,
            plan_id,
            summary,
            modification,
            submitted_by,
        })
    }

    /// Whether `caller` is the principal that submitted it: no principal
    /// decides on its own submission, so it is no item of its inbox.
    pub fn is_own(&self, caller: &Caller) -> bool {
        matches!(caller, Caller::Principal(p) if !self.submitted_by.is_empty() && self.submitted_by == p.principal_id)
    }
}

/// Kind of change, as watchers see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    SessionCreated,
    SessionUpdated,
    SessionDeleted,
    PlanUpdated,
    TodosUpdated,
    TodosCleared,
    /// A principal was created, deleted or had its token rotated: never
    /// sent to watchers, but every server follows it to forget tokens.
    PrincipalChanged,
    /// A plan or modification started waiting for approval (inbox
    /// watchers only).
    InboxAdded,
    /// It stopped waiting: decided, or its session deleted (inbox watchers
    /// only).
    InboxRemoved,
}

impl EventKind {
    /// Whether only inbox watchers get events of this kind.
    pub fn is_inbox(self) -> bool {
        matches!(self, EventKind::InboxAdded | EventKind::InboxRemoved)
    }
}

/// The object an event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventObject {
    Session(Session),
    /// Boxed: a plan is much larger than the other objects.
    Plan(Box<PlanRecord>),
    Todos(TodoRecord),
    /// The id of the principal that changed (nothing secret).
    Principal(String),
    /// An item of the inbox (boxed: it holds its session).
    Inbox(Box<InboxItem>),
}

/// One change within a committed revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub kind: EventKind,
    pub object: EventObject,
    /// The session concerned, or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session_id: String,
    /// That session's parent at this revision, or empty. Tree watchers decide
    /// membership from it, so it is recorded, not looked up later.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parent_session_id: String,
    /// The agent concerned, or empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_id: String,
    /// The session's ancestors at this revision, root first, parent last.
    /// With it a tree filter needs no history: an event belongs to the tree
    /// of `r` when its session is `r` or has `r` among its ancestors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<String>,
    /// For a move: the parent and ancestors before it, so the tree the
    /// session left also sees it go.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_parent_session_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub previous_ancestors: Vec<String>,
    /// For a session handed to another agent: the agent before, so that
    /// agent's watchers also see it go.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub previous_agent_id: String,
    /// The session moved in the tree (possibly from being a root, which
    /// `previous_parent_session_id` cannot tell): the ancestry of all
    /// below it changed too.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub moved: bool,
    /// For a plan event: the plan closed in this revision, and how
    /// (completed, rejected, superseded): what `plan.completed` webhooks
    /// are told from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Outcome>,
}

impl Event {
    /// An event about a session record; `ancestors` at this revision.
    pub fn session(kind: EventKind, s: &Session, ancestors: Vec<String>) -> Self {
        Event {
            kind,
            session_id: s.session_id.clone(),
            parent_session_id: s.parent_session_id.clone().unwrap_or_default(),
            agent_id: s.agent_id.clone(),
            object: EventObject::Session(s.clone()),
            ancestors,
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        }
    }

    /// A plan change of `session`.
    pub fn plan(session: &Session, plan: &PlanRecord, ancestors: Vec<String>) -> Self {
        Event {
            kind: EventKind::PlanUpdated,
            session_id: session.session_id.clone(),
            parent_session_id: session.parent_session_id.clone().unwrap_or_default(),
            agent_id: session.agent_id.clone(),
            object: EventObject::Plan(Box::new(plan.clone())),
            ancestors,
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        }
    }

    /// An item starting (`InboxAdded`) or ending (`InboxRemoved`) a wait.
    pub fn inbox(kind: EventKind, item: InboxItem, ancestors: Vec<String>) -> Self {
        Event {
            kind,
            session_id: item.session.session_id.clone(),
            parent_session_id: item.session.parent_session_id.clone().unwrap_or_default(),
            agent_id: item.session.agent_id.clone(),
            object: EventObject::Inbox(Box::new(item)),
            ancestors,
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        }
    }

    /// A todo list change.
    pub fn todos(list: &TodoRecord) -> Self {
        Event {
            kind: if list.items.is_empty() {
                EventKind::TodosCleared
            } else {
                EventKind::TodosUpdated
            },
            session_id: String::new(),
            parent_session_id: String::new(),
            agent_id: list.agent_id.clone(),
            object: EventObject::Todos(list.clone()),
            ancestors: Vec::new(),
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        }
    }

    /// A principal change, for servers to follow (never for watchers).
    pub fn principal(principal_id: &str) -> Self {
        Event {
            kind: EventKind::PrincipalChanged,
            session_id: String::new(),
            parent_session_id: String::new(),
            agent_id: String::new(),
            object: EventObject::Principal(principal_id.to_owned()),
            ancestors: Vec::new(),
            previous_parent_session_id: String::new(),
            previous_ancestors: Vec::new(),
            previous_agent_id: String::new(),
            moved: false,
            closed: None,
        }
    }

    /// Whether the event concerns `root` or a session below it, now or
    /// (for a move) before.
    pub fn in_tree(&self, root: &str) -> bool {
        !self.session_id.is_empty()
            && (self.session_id == root
                || self.ancestors.iter().any(|a| a == root)
                || self.previous_ancestors.iter().any(|a| a == root))
    }
}

/// Every event of one committed revision; a revision is never split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revision {
    pub revision: u64,
    pub time: Micros,
    pub events: Vec<Event>,
}

/// A page of session ids.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPage {
    pub sessions: Vec<Session>,
    /// The last id of this page when more may follow.
    pub next_after: Option<String>,
}
