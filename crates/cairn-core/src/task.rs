//! A session as an A2A task (`docs/a2a.md`): the task state its plan and
//! its agent's liveness give. Cairn tracks what A2A's task states name;
//! this is the one place that says which is which.

use crate::liveness::Liveness;
use crate::plan_mode::SessionPlan;

/// The A2A task states a session can be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
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
    /// Every state.
    pub const ALL: [TaskState; 5] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::InputRequired,
        TaskState::Completed,
        TaskState::Failed,
    ];

    /// The state's short name (A2A's, lowercase): `input-required`.
    pub fn name(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
        }
    }

    /// The state a short name names.
    pub fn parse(name: &str) -> Option<TaskState> {
        TaskState::ALL.into_iter().find(|s| s.name() == name)
    }

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
    with_liveness(plan_state(plan), liveness == Some(Liveness::Lost))
}

/// What the plan alone says: the task state while its agent is not lost.
pub fn plan_state(plan: &SessionPlan) -> TaskState {
    if plan.is_complete() {
        return TaskState::Completed;
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

fn with_liveness(of_plan: TaskState, lost: bool) -> TaskState {
    if lost && of_plan != TaskState::Completed {
        TaskState::Failed
    } else {
        of_plan
    }
}

/// Where a subscriber of a task's changes stands: every change of
/// `revision` received, and `state` the last state told. As a token
/// (A2A's resume extension, a push's metadata): `REVISION.STATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub revision: u64,
    pub state: TaskState,
}

impl Resume {
    /// The token a subscriber sends back.
    pub fn token(self) -> String {
        format!("{}.{}", self.revision, self.state.name())
    }

    /// A token as a subscriber sent it, in `field`.
    pub fn parse(field: &str, token: &str) -> crate::error::Result<Resume> {
        let bad = || {
            crate::error::Error::invalid(
                field,
                "must be the cairn_resume token of an event of this stream (REVISION.STATE)",
            )
        };
        let (revision, name) = token.trim().split_once('.').ok_or_else(bad)?;
        let revision = revision.parse().map_err(|_| bad())?;
        let state = TaskState::parse(name).ok_or_else(bad)?;
        Ok(Resume { revision, state })
    }
}

/// A task followed change by change, as a subscriber sees it: what its
/// plan says, whether its agent is lost, and the state last told. Each
/// revision that touches the session is applied whole, and yields the new
/// state only when it differs from the one last told, so a subscriber sees
/// every change of state once, whatever else the revision changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    of_plan: TaskState,
    lost: bool,
    told: TaskState,
}

impl Following {
    /// A task whose plan says `of_plan` and whose agent is `lost` or not,
    /// that state told.
    pub fn new(of_plan: TaskState, lost: bool) -> Self {
        Following {
            of_plan,
            lost,
            told: with_liveness(of_plan, lost),
        }
    }

    /// A task last told in `state`, followed again from there (a resumed
    /// subscription). A task told a state other than failed had an agent
    /// that was not lost, so its plan said that state; a failed one is
    /// terminal, and nothing follows it.
    pub fn resumed(state: TaskState) -> Self {
        if state == TaskState::Failed {
            Following {
                of_plan: TaskState::Working,
                lost: true,
                told: state,
            }
        } else {
            Following::new(state, false)
        }
    }

    /// The state last told.
    pub fn told(&self) -> TaskState {
        self.told
    }

    /// Applies one revision: what the plan says now if it changed, and
    /// whether the agent is lost now if its session changed. The new state,
    /// if it differs from the one last told.
    pub fn revision(
        &mut self,
        of_plan: Option<TaskState>,
        lost: Option<bool>,
    ) -> Option<TaskState> {
        if let Some(p) = of_plan {
            self.of_plan = p;
        }
        if let Some(l) = lost {
            self.lost = l;
        }
        let now = with_liveness(self.of_plan, self.lost);
        (now != self.told).then(|| {
            self.told = now;
            now
        })
    }
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

    #[test]
    fn a_followed_task_tells_each_change_of_state_once() {
        use TaskState::{Completed, Failed, InputRequired, Submitted, Working};
        let mut f = Following::new(Submitted, false);
        assert_eq!(f.revision(Some(Working), None), Some(Working));
        // Another step done, a renewal: the same state, nothing to tell.
        assert_eq!(f.revision(Some(Working), None), None);
        assert_eq!(f.revision(None, Some(false)), None);
        assert_eq!(f.revision(Some(InputRequired), None), Some(InputRequired));
        assert_eq!(f.revision(Some(Working), Some(false)), Some(Working));
        // Lost, then back before anything finished: failed, then working.
        assert_eq!(f.revision(None, Some(true)), Some(Failed));
        assert_eq!(f.revision(Some(InputRequired), None), None);
        assert_eq!(f.revision(None, Some(false)), Some(InputRequired));
        // A finished plan stays completed whatever the agent does.
        assert_eq!(f.revision(Some(Completed), Some(true)), Some(Completed));
        assert_eq!(f.told(), Completed);

        // Resumed where a subscriber left off: only what differs is told.
        let mut r = Following::resumed(InputRequired);
        assert_eq!(r.revision(None, Some(false)), None);
        assert_eq!(r.revision(Some(Working), None), Some(Working));
        let mut lost = Following::resumed(Failed);
        assert_eq!(lost.told(), Failed);
        assert_eq!(lost.revision(None, Some(true)), None);
    }

    proptest::proptest! {
        /// Whatever revisions come, a followed task tells exactly the
        /// states that differ from the one before, and ends telling the
        /// state the rule gives for what it last heard.
        #[test]
        fn following_tells_exactly_the_changes(
            start in 0usize..4,
            revisions in proptest::collection::vec((proptest::option::of(0usize..4), proptest::option::of(proptest::bool::ANY)), 0..40),
        ) {
            use TaskState::{Completed, InputRequired, Submitted, Working};
            let states = [Submitted, Working, InputRequired, Completed];
            let mut f = Following::new(states[start], false);
            let (mut of_plan, mut lost) = (states[start], false);
            let mut told = f.told();
            for (p, l) in revisions {
                let p = p.map(|i| states[i]);
                if let Some(p) = p { of_plan = p; }
                if let Some(l) = l { lost = l; }
                let now = with_liveness(of_plan, lost);
                let said = f.revision(p, l);
                proptest::prop_assert_eq!(said, (now != told).then_some(now));
                told = now;
                proptest::prop_assert_eq!(f.told(), now);
            }
        }
    }
}
