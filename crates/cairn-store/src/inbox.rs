//! The inbox: what awaits the caller's approval, across every tree, oldest
//! first, read from the index of waiting items (`ReadTxn::awaiting_after`)
//! that plan writes keep in their own revision.
//!
//! An item is listed when the caller may approve its session (the approve
//! right, within its `session_roots`) and did not submit it itself (no
//! principal decides on its own plan). A caller with no approve right at
//! all gets an empty inbox without a read.

use cairn_core::access::{self, Action, Caller, Role, SessionFacts};
use cairn_core::error::Result;
use cairn_core::inbox::{Awaited, Awaiting};
use cairn_core::plan_mode::{Modification, PlanModeState};
use cairn_core::session::Session;

use serde::{Deserialize, Serialize};

use crate::ops;
use crate::store::Store;

/// Index entries one page looks at, at most: an approver of one small tree
/// in a store of many waiting items gets a short page and a token rather
/// than a read of everything.
const EXAMINED_PER_PAGE: usize = 4_096;

/// Index entries read at once.
const BATCH: usize = 256;

/// One item awaiting approval (also what an inbox event carries).
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
}

/// A page of the inbox.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboxPage {
    pub items: Vec<InboxItem>,
    /// Where the next page starts, when more may follow.
    pub next_after: Option<Awaiting>,
}

impl Store {
    /// The items awaiting `caller`'s approval after `after`, at most
    /// `limit`, and the revision read at.
    pub async fn inbox(
        &self,
        caller: &Caller,
        after: Option<Awaiting>,
        limit: usize,
    ) -> Result<(InboxPage, u64)> {
        if let Some(a) = &after {
            self.limits()
                .check_resource_id("page_token", &a.session_id)?;
        }
        if let Caller::Principal(p) = caller
            && !p.is_admin()
            && !p.has(Role::Approver)
        {
            return Ok((InboxPage::default(), self.revision()));
        }
        let caller = caller.clone();
        let limit = limit.max(1);
        self.read(move |v| {
            let mut page = InboxPage::default();
            let mut cursor = after;
            let mut examined = 0;
            loop {
                let keys = v.awaiting_after(cursor.as_ref(), BATCH)?;
                let exhausted = keys.len() < BATCH;
                for key in keys {
                    examined += 1;
                    cursor = Some(key.clone());
                    if let Some(item) = visible(v, &caller, key)? {
                        page.items.push(item);
                    }
                    if page.items.len() >= limit || examined >= EXAMINED_PER_PAGE {
                        page.next_after = cursor;
                        return Ok((page, v.revision()?));
                    }
                }
                if exhausted {
                    return Ok((page, v.revision()?));
                }
            }
        })
        .await
    }
}

/// The item `key` names, if `caller` may decide on it.
fn visible(v: &dyn crate::ReadTxn, caller: &Caller, key: Awaiting) -> Result<Option<InboxItem>> {
    let (Some(session), Some(record)) = (v.session(&key.session_id)?, v.plan(&key.session_id)?)
    else {
        return Ok(None);
    };
    if let Caller::Principal(_) = caller {
        let chain = ops::ancestors(v, session.parent_session_id.as_deref())?;
        let facts = SessionFacts {
            session_id: &session.session_id,
            agent_id: &session.agent_id,
            ancestors: &chain,
        };
        if access::check_session(caller, Action::Approve, &facts).is_err() {
            return Ok(None);
        }
    }
    let Some(item) = item_of(session, &record.plan.mode, key) else {
        return Ok(None);
    };
    if submitted_by(caller, &item.submitted_by) {
        return Ok(None);
    }
    Ok(Some(item))
}

/// Whether `caller` is the principal that submitted an item (no principal
/// decides on its own submission, so it is no item of its inbox).
pub fn submitted_by(caller: &Caller, submitter: &str) -> bool {
    matches!(caller, Caller::Principal(p) if !submitter.is_empty() && submitter == p.principal_id)
}

/// The item `key` names in a session's plan-mode state, if it still waits.
pub fn item_of(session: Session, mode: &PlanModeState, key: Awaiting) -> Option<InboxItem> {
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
        key,
        goal: mode.goal.clone(),
        session,
        plan_id,
        summary,
        modification,
        submitted_by,
    })
}
