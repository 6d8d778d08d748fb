//! What waits on a person: the plans and modifications awaiting approval,
//! across every tree, oldest first.
//!
//! Each one is an [`Awaiting`] key: when it started waiting, its session,
//! and which item of the session it is. The store keeps an index of these
//! keys, updated in the revision that starts or ends the wait, so an inbox
//! page reads the oldest waiting items without scanning every plan.

use serde::{Deserialize, Serialize};

use crate::Micros;
use crate::error::{Error, Result};

/// One item of a session awaiting approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Awaited {
    /// The plan submitted with `ExitPlanMode`.
    Plan,
    /// A modification of the active plan, by its id.
    Modification(u32),
}

impl Awaited {
    /// The item as one key segment: `plan`, or `mod-<id>`.
    pub fn key(self) -> String {
        match self {
            Awaited::Plan => "plan".into(),
            Awaited::Modification(id) => format!("mod-{id}"),
        }
    }

    /// The item a key segment names.
    pub fn parse(key: &str) -> Option<Awaited> {
        match key {
            "plan" => Some(Awaited::Plan),
            _ => key
                .strip_prefix("mod-")
                .and_then(|id| id.parse().ok())
                .map(Awaited::Modification),
        }
    }
}

/// One waiting item as the index orders it: oldest first, then by
/// session, then by item.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Awaiting {
    /// When it started waiting.
    pub since: Micros,
    pub session_id: String,
    pub item: Awaited,
}

impl Awaiting {
    /// A page token: `since/session/item` (ids hold no `/`).
    pub fn token(&self) -> String {
        format!("{}/{}/{}", self.since, self.session_id, self.item.key())
    }

    /// The key a page token names, or an error naming `field`.
    pub fn from_token(field: &str, token: &str) -> Result<Awaiting> {
        let bad = || Error::invalid(field, "not a token this server gave");
        let mut parts = token.splitn(3, '/');
        let since = parts.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
        let session_id = parts.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
        let item = parts.next().and_then(Awaited::parse).ok_or_else(bad)?;
        Ok(Awaiting {
            since,
            session_id: session_id.to_owned(),
            item,
        })
    }
}

/// What a change of one session's plan-mode state does to the index:
/// the keys to remove and the keys to add.
pub fn changes(before: &[Awaiting], after: &[Awaiting]) -> (Vec<Awaiting>, Vec<Awaiting>) {
    let gone = before
        .iter()
        .filter(|k| !after.contains(k))
        .cloned()
        .collect();
    let new = after
        .iter()
        .filter(|k| !before.contains(k))
        .cloned()
        .collect();
    (gone, new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn items_and_tokens_read_back() {
        for item in [Awaited::Plan, Awaited::Modification(7)] {
            assert_eq!(Awaited::parse(&item.key()), Some(item));
        }
        assert_eq!(Awaited::parse("mod-x"), None);
        let k = Awaiting {
            since: 1_700_000_000_000_000,
            session_id: "orch:coder".into(),
            item: Awaited::Modification(3),
        };
        assert_eq!(Awaiting::from_token("page_token", &k.token()).ok(), Some(k));
        for bad in ["", "x/s/plan", "1//plan", "1/s/", "1/s/mod-", "1/s"] {
            assert!(Awaiting::from_token("page_token", bad).is_err(), "{bad}");
        }
    }

    proptest! {
        /// Applying the changes to the keys before gives the keys after.
        #[test]
        fn changes_turn_before_into_after(
            before in proptest::collection::btree_set((0i64..5, 0u32..4), 0..6),
            after in proptest::collection::btree_set((0i64..5, 0u32..4), 0..6),
        ) {
            let key = |(since, id): (i64, u32)| Awaiting {
                since,
                session_id: "s".into(),
                item: if id == 0 { Awaited::Plan } else { Awaited::Modification(id) },
            };
            let before: Vec<_> = before.into_iter().map(key).collect();
            let after: Vec<_> = after.into_iter().map(key).collect();
            let (gone, new) = changes(&before, &after);
            let mut index: std::collections::BTreeSet<_> = before.iter().cloned().collect();
            for g in &gone {
                prop_assert!(index.remove(g));
            }
            for n in new {
                prop_assert!(index.insert(n));
            }
            prop_assert_eq!(index, after.into_iter().collect());
        }
    }
}
