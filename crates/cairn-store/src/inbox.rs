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
use cairn_core::inbox::Awaiting;

use crate::ops;
use crate::records::InboxItem;
use crate::store::Store;

/// Index entries one page looks at, at most: an approver of one small tree
/// in a store of many waiting items gets a short page and a token rather
/// than a read of everything.
const EXAMINED_PER_PAGE: usize = 4_096;

/// Index entries read at once.
const BATCH: usize = 256;

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

/// The item `key` names, with its session's ancestors and its plan's
/// revision, if it still waits (what both this inbox and an inbox watch's
/// initial state read).
pub fn read(
    v: &dyn crate::ReadTxn,
    key: Awaiting,
) -> Result<Option<(InboxItem, Vec<String>, u64)>> {
    let (Some(session), Some(record)) = (v.session(&key.session_id)?, v.plan(&key.session_id)?)
    else {
        return Ok(None);
    };
    let chain = ops::ancestors(v, session.parent_session_id.as_deref())?;
    Ok(InboxItem::of(session, &record.plan.mode, key).map(|i| (i, chain, record.revision)))
}

/// The item `key` names, if `caller` may decide on it.
fn visible(v: &dyn crate::ReadTxn, caller: &Caller, key: Awaiting) -> Result<Option<InboxItem>> {
    let Some((item, chain, _)) = read(v, key)? else {
        return Ok(None);
    };
    let facts = SessionFacts {
        session_id: &item.session.session_id,
        agent_id: &item.session.agent_id,
        ancestors: &chain,
    };
    if access::check_session(caller, Action::Approve, &facts).is_err() || item.is_own(caller) {
        return Ok(None);
    }
    Ok(Some(item))
}
