//! A session as an A2A task (`docs/a2a.md`): the task state its plan and
//! its agent's liveness give. Cairn tracks what A2A's task states name;
//! this is the one place that says which is which.

use crate::liveness::Liveness;
use crate::plan_mode::SessionPlan;

/// The A2A task states a session can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// No plan yet.
    Submitted,
    /// A plan, not finished.
    Working,
    /// A plan or a modification awaits a person's approval.
    InputRequired,
    /// Every step of the plan is finished.
    Completed,
    /// The agent was lost (no renewal for its TTL and grace) before the
    /// plan finished.
    Failed,
}

impl TaskState {
    /// Whether A2A counts the state as terminal.
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Failed)
    }
}

/// The task state of a session with `plan` whose agent is in `liveness`
/// (`None`: it never took a lease). A finished plan stays completed
/// whatever happens to the agent after; a lost agent fails an unfinished
/// one, even while it awaits approval (nobody is left to go on).
pub fn task_state(plan: &SessionPlan, liveness: Option<Liveness>) -> TaskState {
    if plan.is_complete() {
        return TaskState::Completed;
    }
    if liveness == Some(Liveness::Lost) {
        return TaskState::Failed;
    }
    let mode = &plan.mode;
    if mode.pending.is_some() || !mode.modifications.is_empty() {
        return TaskState::InputRequired;
    }
    if plan.checklist.items.is_empty() && mode.active.is_none() {
        return TaskState::Submitted;
    }
    TaskState::Working
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{PlanItem, StepStatus};
    use crate::plan_mode::PendingPlan;

    fn items(statuses: &[StepStatus]) -> SessionPlan {
        let mut plan = SessionPlan::default();
        for (i, status) in statuses.iter().enumerate() {
            plan.checklist.items.push(PlanItem {
                id: u32::try_from(i).unwrap() + 1,
                step: format!("step {i}"),
                status: *status,
                blocked_by: Vec::new(),
            });
        }
        plan
    }

    #[test]
    fn each_state_from_the_plan_and_the_agent() {
        use StepStatus::{Completed, InProgress, Pending};
        assert_eq!(
            task_state(&SessionPlan::default(), None),
            TaskState::Submitted
        );
        assert_eq!(task_state(&items(&[Pending]), None), TaskState::Working);
        assert_eq!(
            task_state(&items(&[Completed, InProgress]), Some(Liveness::Active)),
            TaskState::Working
        );
        assert_eq!(
            task_state(&items(&[Completed, Completed]), Some(Liveness::Lost)),
            TaskState::Completed
        );
        assert_eq!(
            task_state(&items(&[Completed, InProgress]), Some(Liveness::Lost)),
            TaskState::Failed
        );
        let mut waiting = items(&[Pending]);
        waiting.mode.pending = Some(PendingPlan::default());
        assert_eq!(
            task_state(&waiting, Some(Liveness::Idle)),
            TaskState::InputRequired
        );
        assert_eq!(
            task_state(&waiting, Some(Liveness::Lost)),
            TaskState::Failed
        );
        assert!(TaskState::Completed.is_terminal() && !TaskState::InputRequired.is_terminal());
    }
}
