//! The `update_plan` checklist (docs/rules.md, The checklist).
//!
//! A whole-list replace with three rules: at most one item in progress, plans
//! shorter than a threshold are answered with a hint instead of being stored,
//! and items keep their numeric id across updates so watchers can follow an
//! item while its neighbours change.
//!
//! An observed plan ([`PlanSource::Observed`]: an agent's own planning tool,
//! mirrored by `cairn hook`) is recorded as the agent kept it: only its shape
//! is checked, and its ids are the agent's own.

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
    /// Dropped without being done (observed plans only).
    Cancelled,
}

impl StepStatus {
    /// Whether the step needs no more work: completed or cancelled.
    pub fn is_finished(self) -> bool {
        matches!(self, StepStatus::Completed | StepStatus::Cancelled)
    }
}

/// Where a checklist comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanSource {
    /// Cairn's own tools: every checklist rule applies.
    #[default]
    Tool,
    /// An agent's own planning tool, mirrored: recorded as it is.
    Observed,
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
    /// Ids of the items it waits for (observed plans).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_by: Vec<u32>,
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
    /// Where the items come from.
    #[serde(skip_serializing_if = "crate::is_zero")]
    pub source: PlanSource,
}

impl Checklist {
    /// True when there is at least one item and every item is finished
    /// (completed, or cancelled in an observed plan).
    pub fn is_complete(&self) -> bool {
        !self.items.is_empty() && self.items.iter().all(|i| i.status.is_finished())
    }

    /// The step an agent is at: the one in progress, else the first not
    /// yet finished.
    pub fn current(&self) -> Option<&PlanItem> {
        self.items
            .iter()
            .find(|i| i.status == StepStatus::InProgress)
            .or_else(|| self.items.iter().find(|i| !i.status.is_finished()))
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
    /// Ids of the items it waits for (kept in observed plans only).
    pub blocked_by: Vec<u32>,
}

/// A validated `update_plan` call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanUpdate {
    /// Why the plan changes.
    pub explanation: String,
    /// The whole new checklist.
    pub items: Vec<ItemInput>,
    /// A tool plan, or an agent's own plan observed.
    pub source: PlanSource,
}

/// The largest id an observed step may bring (agents number their tasks
/// from 1; Claude Code's are small decimals).
pub const MAX_OBSERVED_ID: u32 = 1 << 30;

/// Checks an update against every checklist rule and limit.
pub fn validate_update(update: &PlanUpdate, limits: &Limits) -> Result<()> {
    limits.check_text(|| "explanation".into(), &update.explanation)?;
    // An agent may delete every task it had: its plan is then empty.
    if update.items.is_empty() && update.source != PlanSource::Observed {
        return Err(Error::invalid("plan", "must contain at least one step"));
    }
    Limits::check_count(
        "plan",
        "number of steps",
        limits.max_plan_steps,
        update.items.len(),
    )?;
    let observed = update.source == PlanSource::Observed;
    for (i, item) in update.items.iter().enumerate() {
        limits.check_required_text(|| format!("plan[{i}].step"), &item.step)?;
        match item.status {
            None => {
                return Err(Error::invalid(
                    format!("plan[{i}].status"),
                    if observed {
                        "must be pending, in_progress, completed or cancelled"
                    } else {
                        "must be pending, in_progress or completed"
                    },
                ));
            }
            Some(StepStatus::Cancelled) if !observed => {
                return Err(Error::invalid(
                    format!("plan[{i}].status"),
                    "cancelled is kept only in observed plans: must be pending, in_progress or completed",
                ));
            }
            Some(_) => {}
        }
        Limits::check_count(
            &format!("plan[{i}].blocked_by"),
            "number of blocking steps",
            limits.max_plan_steps,
            item.blocked_by.len(),
        )?;
    }
    if observed {
        // What the agent did, as it did it: ids must still name one item
        // each, so that watchers can follow them.
        let mut seen = std::collections::HashSet::new();
        for (i, item) in update.items.iter().enumerate() {
            // The counter hands out ids above every id seen: an id near
            // the top would leave it nothing fresh to hand out.
            if item.id > MAX_OBSERVED_ID {
                return Err(Error::invalid(
                    format!("plan[{i}].id"),
                    format!("an observed step's id is at most {MAX_OBSERVED_ID}"),
                ));
            }
            if item.id != 0 && !seen.insert(item.id) {
                return Err(Error::invalid(
                    format!("plan[{i}].id"),
                    "another step of the plan has this id",
                ));
            }
        }
        return Ok(());
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
    // An observed plan is the agent's own: recorded however short.
    if n == 0 || n >= threshold || update.source == PlanSource::Observed {
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
    if update.source == PlanSource::Observed {
        return apply_observed(prev, update);
    }
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
            let id = id.unwrap_or_else(|| fresh(&mut next_id));
            PlanItem {
                id,
                step: input.step,
                status: input.status.unwrap_or_default(),
                blocked_by: Vec::new(),
            }
        })
        .collect();
    Checklist {
        explanation: update.explanation,
        items,
        next_id,
        source: PlanSource::Tool,
    }
}

/// The next id of a checklist's counter, which only grows: an id is never
/// handed out twice within a session.
fn fresh(next_id: &mut u32) -> u32 {
    let id = *next_id;
    *next_id = next_id.saturating_add(1);
    id
}

/// An observed plan as the agent kept it: its ids where it gave them, its
/// statuses and dependencies as they are. An item without an id (Codex's
/// and Gemini's lists have none) keeps the id of an unclaimed previous item
/// with the same text, as in a tool plan, or gets a fresh one above every
/// id seen.
fn apply_observed(prev: &Checklist, update: PlanUpdate) -> Checklist {
    let given: std::collections::HashSet<u32> = update
        .items
        .iter()
        .map(|i| i.id)
        .filter(|id| *id != 0)
        .collect();
    let highest = given.iter().copied().max().unwrap_or(0);
    let mut next_id = prev.next_id.max(highest.saturating_add(1)).max(1);
    let mut claimed: Vec<bool> = prev.items.iter().map(|p| given.contains(&p.id)).collect();
    let items = update
        .items
        .into_iter()
        .map(|input| {
            let id = if input.id != 0 {
                input.id
            } else if let Some(pos) = prev
                .items
                .iter()
                .enumerate()
                .position(|(p, old)| !claimed[p] && old.step == input.step)
            {
                claimed[pos] = true;
                prev.items[pos].id
            } else {
                fresh(&mut next_id)
            };
            PlanItem {
                id,
                step: input.step,
                status: input.status.unwrap_or_default(),
                blocked_by: input.blocked_by,
            }
        })
        .collect();
    Checklist {
        explanation: update.explanation,
        items,
        next_id,
        source: PlanSource::Observed,
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
            blocked_by: Vec::new(),
        }
    }

    fn update(items: Vec<ItemInput>) -> PlanUpdate {
        PlanUpdate {
            explanation: "why".into(),
            items,
            source: PlanSource::Tool,
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
                blocked_by: Vec::new(),
            }),
            0..8,
        )
        .prop_map(update)
    }

    fn observed(items: Vec<(u32, &str, StepStatus)>) -> PlanUpdate {
        PlanUpdate {
            explanation: String::new(),
            items: items
                .into_iter()
                .map(|(id, step, status)| ItemInput {
                    id,
                    step: step.into(),
                    status: Some(status),
                    blocked_by: Vec::new(),
                })
                .collect(),
            source: PlanSource::Observed,
        }
    }

    #[test]
    fn an_observed_plan_is_recorded_as_the_agent_kept_it() {
        let limits = Limits::default();
        // Two in progress, a cancelled step, one step: all stored as they are.
        let u = observed(vec![
            (7, "Write the parser", InProgress),
            (3, "Add tests", InProgress),
            (0, "Old idea", StepStatus::Cancelled),
        ]);
        validate_update(&u, &limits).unwrap();
        assert_eq!(simple_task_hint(&u, 4), None);
        let list = apply_update(&Checklist::default(), u);
        let ids: Vec<u32> = list.items.iter().map(|i| i.id).collect();
        assert_eq!(ids, [7, 3, 8], "the agent's ids, a fresh one above them");
        assert_eq!(list.source, PlanSource::Observed);
        let one = observed(vec![(1, "Only step", Pending)]);
        assert_eq!(simple_task_hint(&one, 4), None);
        // Finished is completed or cancelled.
        let done = apply_update(
            &list,
            observed(vec![(7, "a", Completed), (3, "b", StepStatus::Cancelled)]),
        );
        assert!(done.is_complete());
        // A list without ids keeps its items' ids by their text.
        let first = apply_update(
            &Checklist::default(),
            observed(vec![(0, "a", InProgress), (0, "b", Pending)]),
        );
        let next = apply_update(
            &first,
            observed(vec![(0, "a", Completed), (0, "b", InProgress)]),
        );
        assert_eq!(
            first.items.iter().map(|i| i.id).collect::<Vec<_>>(),
            next.items.iter().map(|i| i.id).collect::<Vec<_>>()
        );
        // An id at the top of the counter is refused: fresh ids after it
        // would all be the same.
        let top = observed(vec![(u32::MAX, "a", Pending), (0, "b", Pending)]);
        assert!(validate_update(&top, &limits).is_err());
        // Ids still name one step each.
        let twice = observed(vec![(1, "a", Pending), (1, "b", Pending)]);
        assert!(validate_update(&twice, &limits).is_err());
    }

    #[test]
    fn a_tool_plan_cannot_cancel_a_step() {
        let u = update(vec![item("a", StepStatus::Cancelled)]);
        let e = validate_update(&u, &Limits::default()).unwrap_err();
        assert!(e.to_string().contains("observed"), "{e}");
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
                items: once.items.iter().map(|i| ItemInput { id: 0, step: i.step.clone(), status: Some(i.status), blocked_by: Vec::new() }).collect(),
                source: PlanSource::Tool,
            };
            prop_assert_eq!(apply_update(&once, again), once);
        }
    }
}
