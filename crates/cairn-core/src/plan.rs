//! The `update_plan` checklist (docs/rules.md, The checklist).
//!
//! A whole-list replace with three rules: at most one item in progress, plans
//! shorter than a threshold are answered with a hint instead of being stored,
//! and items keep their numeric id across updates so watchers can follow an
//! item while its neighbours change.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits::Limits;

/// Status of a checklist item. Any transition is allowed (skip ahead, go back).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    #[default]
    Pending,
    InProgress,
    Completed,
}

/// One stored checklist item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    /// Stable id; see [`apply_update`].
    pub id: u32,
    /// What to do.
    pub step: String,
    /// Where it stands.
    pub status: StepStatus,
}

/// A session's stored checklist.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Checklist {
    /// The agent's explanation of the last change.
    pub explanation: String,
    /// Ordered items.
    pub items: Vec<PlanItem>,
    /// Next id to hand out. Ids are never reused within a session, so an id
    /// seen by a watcher always means the same item.
    pub next_id: u32,
}

impl Checklist {
    /// True when there is at least one item and every item is completed.
    pub fn is_complete(&self) -> bool {
        !self.items.is_empty() && self.items.iter().all(|i| i.status == StepStatus::Completed)
    }
}

/// One item as a client sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemInput {
    /// An id from an earlier response, to keep an item's id while its text
    /// changes; 0 (or an unknown id) lets the server match by text.
    pub id: u32,
    /// What to do.
    pub step: String,
    /// `None` when the client sent no (or an unknown) status.
    pub status: Option<StepStatus>,
}

/// A validated `update_plan` call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanUpdate {
    /// Why the plan changes.
    pub explanation: String,
    /// The whole new checklist.
    pub items: Vec<ItemInput>,
}

/// Checks an update against every checklist rule and limit.
pub fn validate_update(update: &PlanUpdate, limits: &Limits) -> Result<()> {
    limits.check_text(|| "explanation".into(), &update.explanation)?;
    if update.items.is_empty() {
        return Err(Error::invalid("plan", "must contain at least one step"));
    }
    Limits::check_count(
        "plan",
        "number of steps",
        limits.max_plan_steps,
        update.items.len(),
    )?;
    for (i, item) in update.items.iter().enumerate() {
        limits.check_required_text(|| format!("plan[{i}].step"), &item.step)?;
        if item.status.is_none() {
            return Err(Error::invalid(
                format!("plan[{i}].status"),
                "must be pending, in_progress or completed",
            ));
        }
    }
    let in_progress = update
        .items
        .iter()
        .filter(|i| i.status == Some(StepStatus::InProgress))
        .count();
    if in_progress > 1 {
        return Err(Error::MultipleStepsInProgress);
    }
    Ok(())
}

/// The simple-task hint for a plan of fewer than `threshold` items, or `None`
/// when the plan should be stored. A threshold of 0 turns the hint off.
pub fn simple_task_hint(update: &PlanUpdate, threshold: usize) -> Option<String> {
    let n = update.items.len();
    if n == 0 || n >= threshold {
        return None;
    }
    let first = &update.items[0].step;
    let noun = if n == 1 { "step" } else { "steps" };
    Some(format!(
        "<system_hint tool=\"update_plan\" reason=\"simple_task\">Task \"{first}\" is simple ({n} {noun}) - execute directly without update_plan.</system_hint>"
    ))
}

/// Replaces the checklist, keeping ids stable.
///
/// An item keeps the id of a previous item when the client sends that id
/// back, or else when its text equals an unclaimed previous item's text
/// (first match in order, so duplicates pair up in order). Everything else
/// gets a fresh id. Call [`validate_update`] first.
pub fn apply_update(prev: &Checklist, update: PlanUpdate) -> Checklist {
    let mut claimed = vec![false; prev.items.len()];
    let mut next_id = prev.next_id.max(1);
    let mut ids: Vec<Option<u32>> = vec![None; update.items.len()];

    // Explicit ids first, so a renamed item is not stolen by a text match.
    for (slot, input) in ids.iter_mut().zip(&update.items) {
        if input.id == 0 {
            continue;
        }
        if let Some(pos) = prev
            .items
            .iter()
            .enumerate()
            .position(|(p, old)| !claimed[p] && old.id == input.id)
        {
            claimed[pos] = true;
            *slot = Some(input.id);
        }
    }
    for (slot, input) in ids.iter_mut().zip(&update.items) {
        if slot.is_some() {
            continue;
        }
        if let Some(pos) = prev
            .items
            .iter()
            .enumerate()
            .position(|(p, old)| !claimed[p] && old.step == input.step)
        {
            claimed[pos] = true;
            *slot = Some(prev.items[pos].id);
        }
    }

    let items = update
        .items
        .into_iter()
        .zip(ids)
        .map(|(input, id)| {
            let id = id.unwrap_or_else(|| {
                let id = next_id;
                next_id = next_id.saturating_add(1);
                id
            });
            PlanItem {
                id,
                step: input.step,
                status: input.status.unwrap_or_default(),
            }
        })
        .collect();
    Checklist {
        explanation: update.explanation,
        items,
        next_id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn item(step: &str, status: StepStatus) -> ItemInput {
        ItemInput {
            id: 0,
            step: step.into(),
            status: Some(status),
        }
    }

    fn update(items: Vec<ItemInput>) -> PlanUpdate {
        PlanUpdate {
            explanation: "why".into(),
            items,
        }
    }

    use StepStatus::{Completed, InProgress, Pending};

    #[test]
    fn two_in_progress_is_refused_with_the_seed_text() {
        let u = update(vec![
            item("a", InProgress),
            item("b", InProgress),
            item("c", Pending),
            item("d", Pending),
        ]);
        let err = validate_update(&u, &Limits::default()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "At most one step can be in_progress at a time"
        );
    }

    #[test]
    fn empty_plan_and_empty_step_are_invalid() {
        let l = Limits::default();
        assert_eq!(
            validate_update(&update(vec![]), &l),
            Err(Error::invalid("plan", "must contain at least one step"))
        );
        assert_eq!(
            validate_update(&update(vec![item("a", Pending), item("  ", Pending)]), &l),
            Err(Error::invalid("plan[1].step", "must not be empty"))
        );
        let mut no_status = item("a", Pending);
        no_status.status = None;
        assert!(matches!(
            validate_update(&update(vec![no_status]), &l),
            Err(Error::InvalidField { field, .. }) if field == "plan[0].status"
        ));
    }

    #[test]
    fn limits_are_enforced() {
        let l = Limits {
            max_plan_steps: 2,
            max_text_bytes: 4,
            ..Limits::default()
        };
        assert!(matches!(
            validate_update(
                &update(vec![
                    item("a", Pending),
                    item("b", Pending),
                    item("c", Pending)
                ]),
                &l
            ),
            Err(Error::LimitExceeded { .. })
        ));
        assert!(matches!(
            validate_update(&update(vec![item("abcde", Pending)]), &l),
            Err(Error::LimitExceeded { field, .. }) if field == "plan[0].step"
        ));
    }

    #[test]
    fn statuses_may_skip_and_go_back() {
        let l = Limits::default();
        let u = update(vec![
            item("a", Completed),
            item("b", InProgress),
            item("c", Pending),
        ]);
        assert!(validate_update(&u, &l).is_ok());
        let back = update(vec![
            item("a", InProgress),
            item("b", Pending),
            item("c", Pending),
        ]);
        assert!(validate_update(&back, &l).is_ok());
    }

    #[test]
    fn hint_text_is_exact() {
        let two = update(vec![item("Fix typo", Pending), item("Test", Pending)]);
        assert_eq!(
            simple_task_hint(&two, 4).as_deref(),
            Some(
                "<system_hint tool=\"update_plan\" reason=\"simple_task\">Task \"Fix typo\" is simple (2 steps) - execute directly without update_plan.</system_hint>"
            )
        );
        let one = update(vec![item("Rename x", Pending)]);
        assert!(
            simple_task_hint(&one, 4)
                .unwrap()
                .contains("is simple (1 step) - execute")
        );
        let four = update(vec![
            item("a", Pending),
            item("b", Pending),
            item("c", Pending),
            item("d", Pending),
        ]);
        assert_eq!(simple_task_hint(&four, 4), None);
        assert_eq!(simple_task_hint(&one, 0), None, "threshold 0 turns it off");
    }

    #[test]
    fn ids_are_stable_when_text_is_unchanged() {
        let first = apply_update(
            &Checklist::default(),
            update(vec![
                item("a", Pending),
                item("b", Pending),
                item("c", Pending),
            ]),
        );
        assert_eq!(
            first.items.iter().map(|i| i.id).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        let second = apply_update(
            &first,
            update(vec![
                item("c", InProgress),
                item("new", Pending),
                item("a", Completed),
            ]),
        );
        assert_eq!(
            second
                .items
                .iter()
                .map(|i| (i.id, i.step.as_str(), i.status))
                .collect::<Vec<_>>(),
            vec![
                (3, "c", InProgress),
                (4, "new", Pending),
                (1, "a", Completed)
            ]
        );
        assert_eq!(second.next_id, 5);
    }

    #[test]
    fn explicit_id_keeps_identity_through_a_rename() {
        let first = apply_update(
            &Checklist::default(),
            update(vec![item("a", Pending), item("b", Pending)]),
        );
        let mut renamed = item("b, reworded", Pending);
        renamed.id = 2;
        let second = apply_update(&first, update(vec![item("a", Pending), renamed]));
        assert_eq!(second.items[1].id, 2);
        // An id the checklist never had is ignored, not trusted.
        let mut bogus = item("z", Pending);
        bogus.id = 99;
        let third = apply_update(&second, update(vec![bogus]));
        assert_eq!(third.items[0].id, 3);
    }

    fn arb_status() -> impl Strategy<Value = StepStatus> {
        prop_oneof![Just(Pending), Just(InProgress), Just(Completed)]
    }

    fn arb_update() -> impl Strategy<Value = PlanUpdate> {
        prop::collection::vec(
            (0u32..6, "[abc]{1,2}", arb_status()).prop_map(|(id, step, status)| ItemInput {
                id,
                step,
                status: Some(status),
            }),
            0..8,
        )
        .prop_map(update)
    }

    proptest! {
        /// Whatever sequence of updates arrives, a stored checklist never has
        /// two items in progress, ids within it are unique, and the id
        /// counter only grows.
        #[test]
        fn stored_checklists_keep_their_invariants(updates in prop::collection::vec(arb_update(), 1..10)) {
            let limits = Limits::default();
            let mut list = Checklist::default();
            for u in updates {
                if validate_update(&u, &limits).is_err() {
                    continue;
                }
                let before = list.next_id;
                let n = u.items.len();
                list = apply_update(&list, u);
                prop_assert_eq!(list.items.len(), n);
                prop_assert!(list.items.iter().filter(|i| i.status == InProgress).count() <= 1);
                let mut ids: Vec<u32> = list.items.iter().map(|i| i.id).collect();
                ids.sort_unstable();
                ids.dedup();
                prop_assert_eq!(ids.len(), n);
                prop_assert!(list.items.iter().all(|i| i.id > 0 && i.id < list.next_id));
                prop_assert!(list.next_id >= before);
            }
        }

        /// Resending the stored plan verbatim changes nothing.
        #[test]
        fn resending_is_idempotent(u in arb_update()) {
            prop_assume!(validate_update(&u, &Limits::default()).is_ok());
            let once = apply_update(&Checklist::default(), u);
            let again = PlanUpdate {
                explanation: once.explanation.clone(),
                items: once.items.iter().map(|i| ItemInput { id: 0, step: i.step.clone(), status: Some(i.status) }).collect(),
            };
            prop_assert_eq!(apply_update(&once, again), once);
        }
    }
}
