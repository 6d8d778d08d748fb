//! Every write as a value: what a caller asks to change, as plain data.
//!
//! The server converts each request into a [`Command`]; the store applies
//! it in one place (`cairn_store::ops::apply`), which loads the session's
//! facts, checks access once, checks `expected_revision`, runs the rule
//! and logs the events. An engine that retries a transaction runs the same
//! value again, so a command is `Clone` and applying it never consumes it.
//! Features that write on their own (deadlines, liveness, ingestion hooks)
//! build the same values the RPCs build.

use std::collections::BTreeMap;

use crate::Limits;
use crate::Micros;
use crate::access::{self, Action, Caller, Principal};
use crate::deadline::DeadlineRequest;
use crate::error::Result;
use crate::inbox::Awaited;
use crate::liveness::Liveness;
use crate::plan::{PlanUpdate, apply_update};
use crate::plan_mode::{
    HistoryEntry, ImplementationPlan, Modification, ModificationRequest, SessionPlan, plan_id,
};
use crate::session::Session;
use crate::todo::TodoInput;
use crate::webhook::Webhook;

/// One write, to any resource.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// A change to one session's plan.
    Plan(PlanWrite),
    /// A change to the session tree.
    Session(SessionCommand),
    /// A change to an agent's todo list.
    Todos(TodoCommand),
    /// A change to principals and their tokens (admins only).
    Principal(PrincipalCommand),
    /// A change to webhook subscriptions (admins only).
    Webhook(WebhookCommand),
}

/// A change to webhook subscriptions (admins only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookCommand {
    /// `CreateWebhook`: checked, its secret already sealed; `revision` is
    /// filled in by the write.
    Create(Webhook),
    /// `DeleteWebhook`: the subscription and its undelivered state.
    Delete { webhook_id: String },
    /// `RetryDeadLetter`: a dead letter queued for delivery again.
    Retry { webhook_id: String, key: String },
}

/// A change to one session's plan: where, the revision the caller last saw,
/// and what.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanWrite {
    pub session_id: String,
    /// Fails with `ABORTED` unless the plan is at this revision.
    pub expected_revision: Option<u64>,
    pub command: PlanCommand,
}

/// What a plan write does: one per plan RPC.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanCommand {
    /// `UpdatePlan`: merges a checklist update (validated, past the
    /// simple-task hint).
    Update(PlanUpdate),
    /// `EnterPlanMode`.
    Enter { goal: String, scope: String },
    /// `ExitPlanMode`: submits a plan for approval; its id ends in
    /// `id_suffix`, chosen once so that a retried write names it alike.
    Exit {
        plan: ImplementationPlan,
        id_suffix: String,
        deadline: Option<DeadlineRequest>,
    },
    /// `ApprovePlan`; `approver` is what the request names, recorded only
    /// with authentication off (otherwise the caller is the approver).
    Approve { approver: String },
    /// `RejectPlan`.
    Reject { reason: String },
    /// `CompleteStep`.
    CompleteStep {
        step_id: u32,
        verification_result: String,
    },
    /// `CompletePlan`.
    CompletePlan {
        summary: String,
        deviations: Vec<String>,
    },
    /// `ModifyPlan`: asks for a change to an incomplete step.
    Modify(ModificationRequest),
    /// `ApproveModification` and `RejectModification`.
    DecideModification {
        modification_id: u32,
        decision: Decision,
    },
    /// The server's own: the deadline `at` of `item` passed. Applied only
    /// while the item still waits with that deadline, so of several
    /// servers that see it pass, one applies it.
    Deadline { item: Awaited, at: Micros },
}

/// An approver's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Reject,
}

/// What a plan command yields besides the new plan.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanOutcome {
    /// The plan changed; the new plan is the answer.
    Changed,
    /// `CompletePlan`: the history entry that closed the plan.
    Completed(Box<HistoryEntry>),
    /// `ModifyPlan`: the recorded modification request.
    Modified(Box<Modification>),
}

impl PlanCommand {
    /// The right the command needs on the session.
    pub fn action(&self) -> Action {
        match self {
            PlanCommand::Approve { .. }
            | PlanCommand::Reject { .. }
            | PlanCommand::DecideModification { .. }
            | PlanCommand::Deadline { .. } => Action::Approve,
            PlanCommand::Update(_)
            | PlanCommand::Enter { .. }
            | PlanCommand::Exit { .. }
            | PlanCommand::CompleteStep { .. }
            | PlanCommand::CompletePlan { .. }
            | PlanCommand::Modify(_) => Action::WritePlan,
        }
    }

    /// Whether the command makes an unknown session (as a root) rather than
    /// failing: an agent's first `UpdatePlan` or `EnterPlanMode` needs no
    /// `CreateSession` before it.
    pub fn creates_session(&self) -> bool {
        matches!(self, PlanCommand::Update(_) | PlanCommand::Enter { .. })
    }

    /// Runs the rule on `plan` for `caller` at `now`: the outcome and the
    /// history entries to append. Takes `&self`: a retried transaction runs
    /// the same command again.
    pub fn run(
        &self,
        plan: &mut SessionPlan,
        caller: &Caller,
        now: Micros,
        limits: &Limits,
    ) -> Result<(PlanOutcome, Vec<HistoryEntry>)> {
        let by = access::submitter_id(caller);
        let changed = |history: Vec<HistoryEntry>| Ok((PlanOutcome::Changed, history));
        match self {
            PlanCommand::Update(update) => {
                plan.checklist = apply_update(&plan.checklist, update.clone());
                changed(Vec::new())
            }
            PlanCommand::Enter { goal, scope } => {
                plan.enter(goal.clone(), scope.clone(), limits)?;
                changed(Vec::new())
            }
            PlanCommand::Exit {
                plan: proposed,
                id_suffix,
                deadline,
            } => {
                let id = plan_id(now, id_suffix);
                plan.exit(proposed.clone(), (id, by), deadline.as_ref(), now, limits)?;
                changed(Vec::new())
            }
            PlanCommand::Approve { approver } => {
                // The recorded approver is who is calling, whatever the
                // request says.
                let approver = access::approver_id(caller, approver.clone());
                let superseded = plan.approve(approver, now, limits)?;
                changed(superseded.into_iter().collect())
            }
            PlanCommand::Reject { reason } => {
                changed(vec![plan.reject(reason.clone(), &by, now, limits)?])
            }
            PlanCommand::CompleteStep {
                step_id,
                verification_result,
            } => {
                plan.complete_step(*step_id, verification_result.clone(), now, limits)?;
                changed(Vec::new())
            }
            PlanCommand::CompletePlan {
                summary,
                deviations,
            } => {
                let entry = plan.complete_plan(summary.clone(), deviations.clone(), now, limits)?;
                Ok((PlanOutcome::Completed(Box::new(entry.clone())), vec![entry]))
            }
            PlanCommand::Modify(request) => {
                let m = plan.modify(request.clone(), by, now, limits)?.clone();
                Ok((PlanOutcome::Modified(Box::new(m)), Vec::new()))
            }
            PlanCommand::DecideModification {
                modification_id,
                decision,
            } => {
                match decision {
                    Decision::Approve => plan.approve_modification(*modification_id, &by)?,
                    Decision::Reject => plan.reject_modification(*modification_id, &by)?,
                }
                changed(Vec::new())
            }
            PlanCommand::Deadline { item, at } => {
                let (_, rejected) = plan.pass_deadline(*item, *at, now)?;
                changed(rejected.into_iter().collect())
            }
        }
    }
}

/// A change to the session tree.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionCommand {
    /// `CreateSession` (the id already chosen, so a retry makes the same).
    Create(Session),
    /// `UpdateSession`, moves within the tree included.
    Update {
        session_id: String,
        patch: SessionPatch,
    },
    /// `KeepAlive` when it changes the stored lease, and the server's own
    /// liveness transitions.
    Lease { session_id: String, op: LeaseOp },
    /// `DeleteSession`: with `cascade`, the whole subtree.
    Delete {
        session_id: String,
        cascade: bool,
        expected_revision: Option<u64>,
    },
}

/// What a lease write does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseOp {
    /// Take or re-take the lease (`ACTIVE`), renewed at `holder`: a first
    /// keep-alive, new timings, another server, or an agent back from
    /// `STALLED`, `LOST` or `FINISHED`. Needs the right to write the plan.
    Hold {
        ttl_ms: u64,
        grace_ms: u64,
        holder: String,
    },
    /// The agent says it is done: `FINISHED` (recorded with these timings
    /// if it never held a lease). Needs the right to write the plan.
    Release {
        ttl_ms: u64,
        grace_ms: u64,
        holder: String,
    },
    /// The server's own transition, decided from the signs of life it saw:
    /// applied only while the session is still at `expected_revision`, so
    /// that of several servers deciding the same change, one writes it.
    Mark {
        to: Liveness,
        expected_revision: u64,
        last_seen: Micros,
    },
}

/// Requested changes to a session; `None` keeps a field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionPatch {
    pub title: Option<String>,
    pub agent_id: Option<String>,
    /// `Some(None)` makes the session a root.
    pub parent_session_id: Option<Option<String>>,
    pub labels: Option<BTreeMap<String, String>>,
    pub expected_revision: Option<u64>,
}

/// A change to an agent's todo list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TodoCommand {
    /// `WriteTodos`: validated and merged into the list.
    Write {
        agent_id: String,
        items: Vec<TodoInput>,
        expected_revision: Option<u64>,
    },
}

/// A change to principals (admins only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrincipalCommand {
    /// `CreatePrincipal`: the principal and the hash of its new token.
    Create {
        principal: Principal,
        token_sha256: String,
    },
    /// `DeletePrincipal`.
    Delete {
        principal_id: String,
        expected_revision: Option<u64>,
    },
    /// `RotateToken`: the old token stops working in the same commit.
    RotateToken {
        principal_id: String,
        token_sha256: String,
    },
}

impl From<PlanWrite> for Command {
    fn from(w: PlanWrite) -> Self {
        Command::Plan(w)
    }
}

impl From<SessionCommand> for Command {
    fn from(c: SessionCommand) -> Self {
        Command::Session(c)
    }
}

impl From<TodoCommand> for Command {
    fn from(c: TodoCommand) -> Self {
        Command::Todos(c)
    }
}

impl From<WebhookCommand> for Command {
    fn from(c: WebhookCommand) -> Self {
        Command::Webhook(c)
    }
}

impl From<PrincipalCommand> for Command {
    fn from(c: PrincipalCommand) -> Self {
        Command::Principal(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::plan_mode::Mode;

    #[test]
    fn a_command_runs_again_to_the_same_result() {
        // An engine that retries re-runs the value: the second run on the
        // same starting plan must end where the first did.
        let cmd = PlanCommand::Enter {
            goal: "ship".into(),
            scope: String::new(),
        };
        let limits = Limits::default();
        let start = SessionPlan::default();
        let (mut a, mut b) = (start.clone(), start);
        cmd.run(&mut a, &Caller::Open, 1, &limits).unwrap();
        cmd.run(&mut b, &Caller::Open, 1, &limits).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.mode.mode, Mode::Planning);
    }

    #[test]
    fn approvals_need_the_approve_right_and_only_two_commands_create() {
        let decide = PlanCommand::DecideModification {
            modification_id: 1,
            decision: Decision::Reject,
        };
        assert_eq!(decide.action(), Action::Approve);
        assert_eq!(
            PlanCommand::Reject {
                reason: "no".into()
            }
            .action(),
            Action::Approve
        );
        assert!(PlanCommand::Update(PlanUpdate::default()).creates_session());
        assert!(!decide.creates_session());
        let err = decide
            .run(
                &mut SessionPlan::default(),
                &Caller::Open,
                1,
                &Limits::default(),
            )
            .unwrap_err();
        assert!(matches!(
            err,
            Error::NoActivePlan | Error::ModificationNotFound(_)
        ));
    }
}
