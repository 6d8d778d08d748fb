//! Reads through the access rules: what a caller may see, and nothing a
//! handler must remember to check. Each read checks its ids against the
//! limits, checks the caller's right once, and answers with the revision
//! it read at. Plans come from the hot cache when it has them.

use std::sync::Arc;

use cairn_core::access::{self, Action, Caller, TodoAction};
use cairn_core::error::{Error, Result};
use cairn_core::plan_mode::HistoryEntry;
use cairn_core::session::Session;

use crate::cache::HotPlan;
use crate::hub::Topic;
use crate::ops;
use crate::records::{PlanRecord, PrincipalRecord, SessionPage, TodoRecord};
use crate::store::Store;

/// Which sessions `ListSessions` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionQuery {
    /// Ids strictly after this one (the page token).
    pub after: Option<String>,
    pub limit: usize,
    /// Only this session's children.
    pub parent: Option<String>,
    /// Only this agent's sessions.
    pub agent: Option<String>,
    /// Only the sessions of the tree under this root (itself included),
    /// when it is a root; nothing when it is not one.
    pub tree: Option<String>,
}

/// A page of a session's plan history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistoryPage {
    pub entries: Vec<HistoryEntry>,
    /// The sequence number of the next entry, if there is one.
    pub next: Option<u64>,
}

impl Store {
    /// A session's plan, its facts, and the current revision: from the hot
    /// plans when cached (no database read, no thread hop), else from one
    /// snapshot, which then fills the cache.
    pub async fn read_plan(
        &self,
        caller: &Caller,
        session_id: String,
    ) -> Result<(Arc<HotPlan>, u64)> {
        self.limits().check_resource_id("session_id", &session_id)?;
        if let Some(hot) = self.plans().get(&session_id) {
            access::check_session(caller, Action::Read, &hot.facts(&session_id))?;
            // Read after the entry: at least the revision that put it there.
            return Ok((hot, self.revision()));
        }
        let caller = caller.clone();
        let filler = self.clone();
        self.read(move |v| {
            let session = ops::authorize(v, &caller, Action::Read, &session_id)?;
            let record = ops::plan_or_default(v, &session_id)?;
            let ancestors = ops::ancestors(v, session.parent_session_id.as_deref())?;
            let at = v.revision()?;
            let hot = HotPlan::new(session.agent_id, ancestors, record);
            Ok((filler.plans().fill(at, &session_id, hot), at))
        })
        .await
    }

    /// A session's plan where an unknown session is one in normal mode with
    /// no plan: what `CheckAction` decides from. Only the open door may ask
    /// about an unknown session (a principal's rights need the session).
    pub async fn read_plan_mode(
        &self,
        caller: &Caller,
        session_id: String,
    ) -> Result<(PlanRecord, u64)> {
        self.limits().check_resource_id("session_id", &session_id)?;
        let caller = caller.clone();
        self.read(move |v| {
            if caller != Caller::Open {
                ops::authorize(v, &caller, Action::Read, &session_id)?;
            }
            Ok((ops::plan_or_default(v, &session_id)?, v.revision()?))
        })
        .await
    }

    /// A session's record.
    pub async fn read_session(
        &self,
        caller: &Caller,
        session_id: String,
    ) -> Result<(Session, u64)> {
        self.limits().check_resource_id("session_id", &session_id)?;
        let caller = caller.clone();
        let (mut s, rev) = self
            .read(move |v| {
                let s = ops::authorize(v, &caller, Action::Read, &session_id)?;
                Ok((s, v.revision()?))
            })
            .await?;
        self.show_last_seen(&mut s);
        Ok((s, rev))
    }

    /// A leased session as reads show it: with the last sign of life this
    /// server saw, which renewals (not stored) make later than the stored.
    pub fn show_last_seen(&self, s: &mut Session) {
        if let Some(lease) = &mut s.lease
            && let Some(seen) = self.hub().leases().last_seen(&s.session_id)
        {
            lease.last_seen = lease.last_seen.max(seen);
        }
    }

    /// A page of sessions. A listing lies wholly in the caller's scope:
    /// everything, the children of a session it may read, or the sessions
    /// of an agent it acts as.
    pub async fn list_sessions(
        &self,
        caller: &Caller,
        q: SessionQuery,
    ) -> Result<(SessionPage, u64)> {
        let limits = self.limits();
        for (field, id) in [
            ("page_token", &q.after),
            ("parent_session_id", &q.parent),
            ("agent_id", &q.agent),
            ("context_id", &q.tree),
        ] {
            if let Some(id) = id {
                limits.check_resource_id(field, id)?;
            }
        }
        match (&q.parent, &q.agent, &q.tree) {
            (None, None, None) => access::check_everything(caller)?,
            (None, Some(a), None) => access::check_todos(caller, a, TodoAction::Read)?,
            (Some(_), _, None) | (None, None, Some(_)) => {}
            (_, _, Some(_)) => {
                return Err(Error::Conflicting(
                    "a tree is listed whole: not with a parent or an agent".into(),
                ));
            }
        }
        let caller = caller.clone();
        self.read(move |v| {
            if let Some(p) = &q.parent {
                ops::authorize(v, &caller, Action::Read, p)?;
            }
            if let Some(root) = &q.tree {
                let root_session = ops::authorize(v, &caller, Action::Read, root)?;
                let page = if root_session.parent_session_id.is_some() {
                    // Not a root: no session has it as its tree's root.
                    SessionPage::default()
                } else {
                    ops::list_tree(v, root, q.after.as_deref(), q.limit)?
                };
                return Ok((page, v.revision()?));
            }
            let page = ops::list_sessions(
                v,
                q.after.as_deref(),
                q.limit,
                q.parent.as_deref(),
                q.agent.as_deref(),
                &caller,
            )?;
            Ok((page, v.revision()?))
        })
        .await
        .map(|(mut page, rev)| {
            for s in &mut page.sessions {
                self.show_last_seen(s);
            }
            (page, rev)
        })
    }

    /// Entries of a session's plan history from sequence number `from`:
    /// at most `limit`, ending once `max_bytes` of records are read.
    pub async fn read_history(
        &self,
        caller: &Caller,
        session_id: String,
        from: u64,
        limit: usize,
        max_bytes: usize,
    ) -> Result<(HistoryPage, u64)> {
        self.limits().check_resource_id("session_id", &session_id)?;
        let caller = caller.clone();
        self.read(move |v| {
            ops::authorize(v, &caller, Action::Read, &session_id)?;
            let (entries, next) = v.history(&session_id, from, limit, max_bytes)?;
            Ok((HistoryPage { entries, next }, v.revision()?))
        })
        .await
    }

    /// An agent's todo list; empty if never written.
    pub async fn read_todos(&self, caller: &Caller, agent_id: String) -> Result<(TodoRecord, u64)> {
        self.limits().check_resource_id("agent_id", &agent_id)?;
        access::check_todos(caller, &agent_id, TodoAction::Read)?;
        self.read(move |v| Ok((ops::get_todos(v, &agent_id)?, v.revision()?)))
            .await
    }

    /// Principals ordered by id, strictly after `after`, at most `limit`
    /// (admins only).
    pub async fn list_principals(
        &self,
        caller: &Caller,
        after: Option<String>,
        limit: usize,
    ) -> Result<(Vec<PrincipalRecord>, u64)> {
        access::check_admin(caller)?;
        if let Some(a) = &after {
            self.limits().check_resource_id("page_token", a)?;
        }
        self.read(move |v| Ok((v.principals_after(after.as_deref(), limit)?, v.revision()?)))
            .await
    }

    /// Whether `caller` may follow `topic`: the whole topic must lie in its
    /// scope (no silent filtering, which would make resume revisions lie).
    pub async fn authorize_watch(&self, caller: &Caller, topic: &Topic) -> Result<()> {
        if *caller == Caller::Open {
            return Ok(());
        }
        let ids: Vec<String> = match topic {
            Topic::All | Topic::Principals => return access::check_everything(caller),
            // Anyone may watch its own inbox: its rights choose the items
            // (as for ListInbox), a caller without the approve right sees
            // none.
            Topic::Inbox => return Ok(()),
            Topic::Agent(agent) => return access::check_todos(caller, agent, TodoAction::Read),
            Topic::Session(id) | Topic::Tree(id) => vec![id.clone()],
            Topic::Sessions(ids) | Topic::Trees(ids) => ids.iter().cloned().collect(),
        };
        let whole_trees = matches!(topic, Topic::Tree(_) | Topic::Trees(_));
        let caller = caller.clone();
        self.read(move |v| {
            for id in ids {
                let Some(s) = v.session(&id)? else {
                    // Rights follow a session's place and agent: one that
                    // does not exist yet is only for whole-store readers.
                    access::check_everything(&caller)?;
                    continue;
                };
                let mut chain = Vec::new();
                let facts = ops::facts(v, &s, &mut chain)?;
                if whole_trees {
                    access::check_tree(&caller, &facts)?;
                } else {
                    access::check_session(&caller, Action::Read, &facts)?;
                }
            }
            Ok(())
        })
        .await
    }
}
