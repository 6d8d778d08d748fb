//! `cairn.v1.PlanService`: the checklist and plan mode.
//!
//! Each RPC destructures its request, calls a service function that speaks
//! core types ([`PlanApi::approve`] and the like, which the dashboard calls
//! too), and builds its response. Every plan-mode change goes through
//! [`PlanApi::mutate`], which names what happens to an unknown session
//! ([`IfMissing`]) and counts the request's real size against the commit
//! budget.

use cairn_api as pb;
use cairn_api::plan_service_server::PlanService;
use std::sync::Arc;

use cairn_core::access::{self, Action, Caller, SessionFacts};
use cairn_core::error::{Error, Excerpt, Result};
use cairn_core::plan::{apply_update, simple_task_hint, validate_update};
use cairn_core::plan_mode::{
    self, HistoryEntry, ImplementationPlan, Modification, ModificationRequest, plan_id,
};
use cairn_core::{Limits, Micros, SessionPlan};
use cairn_store::cache::HotPlan;
use cairn_store::ops::{self, IfMissing};
use cairn_store::records::PlanRecord;
use prost::Message as _;
use tonic::{Request, Response, Status};
use tracing::instrument;

use super::{State, caller};
use crate::convert;
use crate::status::status;

/// Message of a stored `UpdatePlan`.
pub const PLAN_UPDATED: &str = "Plan updated";
/// Message of an `UpdatePlan` answered with the simple-task hint.
pub const PLAN_NOT_STORED: &str = "Plan not stored";

/// `ListPlanHistory` page size when the request sets none, and the most.
const DEFAULT_HISTORY_PAGE: usize = 10;
const MAX_HISTORY_PAGE: usize = 100;
/// A history page ends once it holds this many bytes of records, so it
/// fits a default client's 4 MiB message limit.
const HISTORY_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// The plan service.
#[derive(Clone, Debug)]
pub struct PlanApi {
    state: State,
}

/// Where a plan mutation applies, and on whose behalf.
#[derive(Debug, Clone)]
struct Target {
    session_id: String,
    expected: Option<u64>,
    if_missing: IfMissing,
    /// The right it needs on the session.
    action: Action,
    caller: Caller,
    /// The request's encoded size, for the commit byte budget.
    bytes: usize,
}

impl PlanApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        PlanApi { state }
    }

    /// Applies `change` to a session's plan in one durable write. `change`
    /// may run more than once (an engine may retry), so it clones what it
    /// consumes; it returns its output and history entries to append.
    async fn mutate<R, F>(&self, target: Target, mut change: F) -> Result<(R, PlanRecord, u64)>
    where
        R: Send + 'static,
        F: FnMut(&mut SessionPlan, Micros, &Limits) -> Result<(R, Vec<HistoryEntry>)>
            + Send
            + 'static,
    {
        let policy = self.state.policy.clone();
        let Target {
            session_id,
            expected,
            if_missing,
            action,
            caller,
            bytes,
        } = target;
        self.state
            .store
            .write(bytes, move |ctx| {
                ops::mutate_plan(
                    ctx,
                    &session_id,
                    expected,
                    if_missing,
                    action,
                    &caller,
                    &policy.limits,
                    |plan, now| change(plan, now, &policy.limits),
                )
            })
            .await
    }

    /// A session's plan and the current revision: from the hot plans when
    /// cached (no database read, no thread hop), else from one snapshot,
    /// which then fills the cache.
    pub async fn read_plan(
        &self,
        caller: &Caller,
        session_id: String,
    ) -> Result<(Arc<HotPlan>, u64)> {
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let store = &self.state.store;
        if let Some(hot) = store.plans().get(&session_id) {
            access::check_session(
                caller,
                Action::Read,
                &SessionFacts {
                    session_id: &session_id,
                    agent_id: &hot.agent_id,
                    ancestors: &hot.ancestors,
                },
            )?;
            // Read after the entry: at least the revision that put it there.
            return Ok((hot, store.revision()));
        }
        let caller = caller.clone();
        let filler = store.clone();
        store
            .read(move |v| {
                let session = ops::authorize(v, &caller, Action::Read, &session_id)?;
                let record = ops::plan_or_default(v, &session_id)?;
                let ancestors = ops::ancestors(v, session.parent_session_id.as_deref())?;
                let at = v.revision()?;
                let hot = HotPlan::new(session.agent_id, ancestors, record);
                Ok((filler.plans().fill(at, &session_id, hot), at))
            })
            .await
    }

    /// Approves the plan awaiting approval: it becomes the active plan and
    /// the checklist.
    pub async fn approve(
        &self,
        caller: &Caller,
        session_id: String,
        approver: String,
        expected: Option<u64>,
        bytes: usize,
    ) -> Result<(PlanRecord, u64)> {
        // The recorded approver is who is calling, whatever the request says.
        let approver = access::approver_id(caller, approver);
        let target = Target {
            session_id,
            expected,
            if_missing: IfMissing::Fail,
            action: Action::Approve,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, now, limits| {
                let superseded = plan.approve(approver.clone(), now, limits)?;
                Ok(((), superseded.into_iter().collect()))
            })
            .await?;
        Ok((record, revision))
    }

    /// Rejects the plan awaiting approval, back to normal mode.
    pub async fn reject(
        &self,
        caller: &Caller,
        session_id: String,
        reason: String,
        expected: Option<u64>,
        bytes: usize,
    ) -> Result<(PlanRecord, u64)> {
        let by = access::submitter_id(caller);
        let target = Target {
            session_id,
            expected,
            if_missing: IfMissing::Fail,
            action: Action::Approve,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, now, limits| {
                Ok(((), vec![plan.reject(reason.clone(), &by, now, limits)?]))
            })
            .await?;
        Ok((record, revision))
    }

    async fn update_plan(
        &self,
        caller: &Caller,
        req: pb::UpdatePlanRequest,
    ) -> Result<pb::UpdatePlanResponse> {
        let bytes = req.encoded_len();
        let pb::UpdatePlanRequest {
            session_id,
            explanation,
            plan,
            expected_revision,
        } = req;
        let policy = self.state.policy.clone();
        policy.limits.check_resource_id("session_id", &session_id)?;
        let update = convert::plan_update(explanation, plan);
        validate_update(&update, &policy.limits)?;
        if let Some(hint) = simple_task_hint(&update, policy.simple_task_threshold) {
            // Not stored, so nothing is written and no revision is used.
            return Ok(pb::UpdatePlanResponse {
                message: PLAN_NOT_STORED.into(),
                plan: convert::unstored_items(&update),
                explanation: update.explanation,
                stored: false,
                hint,
                revision: self.state.store.revision(),
            });
        }
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Create,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, _, _| {
                plan.checklist = apply_update(&plan.checklist, update.clone());
                Ok(((), Vec::new()))
            })
            .await?;
        let checklist = record.plan.checklist;
        Ok(pb::UpdatePlanResponse {
            message: PLAN_UPDATED.into(),
            explanation: checklist.explanation,
            plan: checklist
                .items
                .into_iter()
                .map(convert::plan_item)
                .collect(),
            stored: true,
            hint: String::new(),
            revision,
        })
    }

    async fn get_plan(
        &self,
        caller: &Caller,
        req: pb::GetPlanRequest,
    ) -> Result<pb::GetPlanResponse> {
        let pb::GetPlanRequest { session_id } = req;
        let (hot, revision) = self.read_plan(caller, session_id).await?;
        Ok(pb::GetPlanResponse {
            plan: Some(convert::plan(hot.record.clone())),
            revision,
        })
    }

    async fn enter(
        &self,
        caller: &Caller,
        req: pb::EnterPlanModeRequest,
    ) -> Result<pb::EnterPlanModeResponse> {
        let bytes = req.encoded_len();
        let pb::EnterPlanModeRequest {
            session_id,
            goal,
            scope,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Create,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, _, limits| {
                plan.enter(goal.clone(), scope.clone(), limits)?;
                Ok(((), Vec::new()))
            })
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn exit(
        &self,
        caller: &Caller,
        req: pb::ExitPlanModeRequest,
    ) -> Result<pb::ExitPlanModeResponse> {
        let bytes = req.encoded_len();
        let pb::ExitPlanModeRequest {
            session_id,
            plan,
            expected_revision,
        } = req;
        let proposed: ImplementationPlan = plan
            .map(convert::implementation_plan_in)
            .transpose()?
            .unwrap_or_default();
        let suffix = random_suffix();
        let by = access::submitter_id(caller);
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, now, limits| {
                plan.exit(
                    proposed.clone(),
                    plan_id(now, &suffix),
                    by.clone(),
                    now,
                    limits,
                )?;
                Ok(((), Vec::new()))
            })
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn status(
        &self,
        caller: &Caller,
        req: pb::GetPlanStatusRequest,
    ) -> Result<pb::GetPlanStatusResponse> {
        let pb::GetPlanStatusRequest { session_id } = req;
        let (hot, revision) = self.read_plan(caller, session_id).await?;
        Ok(status_reply(&hot.record, revision))
    }

    async fn approve_plan(
        &self,
        caller: &Caller,
        req: pb::ApprovePlanRequest,
    ) -> Result<pb::ApprovePlanResponse> {
        let bytes = req.encoded_len();
        let pb::ApprovePlanRequest {
            session_id,
            approver,
            expected_revision,
        } = req;
        let (record, revision) = self
            .approve(caller, session_id, approver, expected_revision, bytes)
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn reject_plan(
        &self,
        caller: &Caller,
        req: pb::RejectPlanRequest,
    ) -> Result<pb::RejectPlanResponse> {
        let bytes = req.encoded_len();
        let pb::RejectPlanRequest {
            session_id,
            reason,
            expected_revision,
        } = req;
        let (record, revision) = self
            .reject(caller, session_id, reason, expected_revision, bytes)
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn complete_step(
        &self,
        caller: &Caller,
        req: pb::CompleteStepRequest,
    ) -> Result<pb::CompleteStepResponse> {
        let bytes = req.encoded_len();
        let pb::CompleteStepRequest {
            session_id,
            step_id,
            verification_result,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let ((), record, revision) = self
            .mutate(target, move |plan, now, limits| {
                plan.complete_step(step_id, verification_result.clone(), now, limits)?;
                Ok(((), Vec::new()))
            })
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn complete_plan(
        &self,
        caller: &Caller,
        req: pb::CompletePlanRequest,
    ) -> Result<pb::CompletePlanResponse> {
        let bytes = req.encoded_len();
        let pb::CompletePlanRequest {
            session_id,
            summary,
            deviations,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let (entry, record, revision) = self
            .mutate(target, move |plan, now, limits| {
                let entry = plan.complete_plan(summary.clone(), deviations.clone(), now, limits)?;
                Ok((entry.clone(), vec![entry]))
            })
            .await?;
        Ok(pb::CompletePlanResponse {
            status: Some(convert::plan_status(&record)),
            entry: Some(convert::history_entry(entry)),
            revision,
        })
    }

    async fn modify(
        &self,
        caller: &Caller,
        req: pb::ModifyPlanRequest,
    ) -> Result<pb::ModifyPlanResponse> {
        let bytes = req.encoded_len();
        let pb::ModifyPlanRequest {
            session_id,
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::WritePlan,
            caller: caller.clone(),
            bytes,
        };
        let request = ModificationRequest {
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
        };
        let by = access::submitter_id(caller);
        let (modification, record, revision) = self
            .mutate(target, move |plan, now, limits| {
                let m: Modification = plan
                    .modify(request.clone(), by.clone(), now, limits)?
                    .clone();
                Ok((m, Vec::new()))
            })
            .await?;
        Ok(pb::ModifyPlanResponse {
            modification: Some(convert::modification(modification)),
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn approve_modification(
        &self,
        caller: &Caller,
        req: pb::ApproveModificationRequest,
    ) -> Result<pb::ApproveModificationResponse> {
        let bytes = req.encoded_len();
        let pb::ApproveModificationRequest {
            session_id,
            modification_id,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::Approve,
            caller: caller.clone(),
            bytes,
        };
        let by = access::submitter_id(caller);
        let ((), record, revision) = self
            .mutate(target, move |plan, _, _| {
                plan.approve_modification(modification_id, &by)?;
                Ok(((), Vec::new()))
            })
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn reject_modification(
        &self,
        caller: &Caller,
        req: pb::RejectModificationRequest,
    ) -> Result<pb::RejectModificationResponse> {
        let bytes = req.encoded_len();
        let pb::RejectModificationRequest {
            session_id,
            modification_id,
            expected_revision,
        } = req;
        let target = Target {
            session_id,
            expected: expected_revision,
            if_missing: IfMissing::Fail,
            action: Action::Approve,
            caller: caller.clone(),
            bytes,
        };
        let by = access::submitter_id(caller);
        let ((), record, revision) = self
            .mutate(target, move |plan, _, _| {
                plan.reject_modification(modification_id, &by)?;
                Ok(((), Vec::new()))
            })
            .await?;
        Ok(status_reply(&record, revision))
    }

    async fn history(
        &self,
        caller: &Caller,
        req: pb::ListPlanHistoryRequest,
    ) -> Result<pb::ListPlanHistoryResponse> {
        let pb::ListPlanHistoryRequest {
            session_id,
            page_size,
            page_token,
        } = req;
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        let limit = match usize::try_from(page_size) {
            Ok(0) => DEFAULT_HISTORY_PAGE,
            Ok(n) => n.min(MAX_HISTORY_PAGE),
            Err(_) => return Err(Error::invalid("page_size", "must not be negative")),
        };
        let from = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse::<u64>()
                .map_err(|_| Error::invalid("page_token", "not a token this server gave"))?
        };
        let caller = caller.clone();
        let ((entries, next), revision) = self
            .state
            .store
            .read(move |v| {
                ops::authorize(v, &caller, Action::Read, &session_id)?;
                Ok((
                    v.history(&session_id, from, limit, HISTORY_PAGE_BYTES)?,
                    v.revision()?,
                ))
            })
            .await?;
        Ok(pb::ListPlanHistoryResponse {
            entries: entries.into_iter().map(convert::history_entry).collect(),
            revision,
            next_page_token: next.map(|n| n.to_string()).unwrap_or_default(),
        })
    }

    async fn check_action(
        &self,
        caller: &Caller,
        req: pb::CheckActionRequest,
    ) -> Result<pb::CheckActionResponse> {
        let pb::CheckActionRequest {
            session_id,
            tool,
            action,
        } = req;
        let limits = &self.state.policy.limits;
        limits.check_resource_id("session_id", &session_id)?;
        limits.check_required_text(|| "tool".into(), &tool)?;
        limits.check_text(|| "action".into(), &action)?;
        let caller = caller.clone();
        let (record, revision) = self
            .state
            .store
            .read(move |v| {
                // An unknown session is in NORMAL mode; only the open door
                // may ask about one (a principal's rights need the session).
                if caller != Caller::Open {
                    ops::authorize(v, &caller, Action::Read, &session_id)?;
                }
                Ok((ops::plan_or_default(v, &session_id)?, v.revision()?))
            })
            .await?;
        let decision = plan_mode::check_action(
            &record.plan.mode,
            &self.state.policy.blocked_tools,
            &tool,
            &action,
        );
        Ok(pb::CheckActionResponse {
            allowed: decision.allowed,
            reason: decision.reason,
            mode: convert::mode(decision.mode).into(),
            revision,
        })
    }
}

fn random_suffix() -> String {
    (0..6)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

/// A response that is the plan's new status and the revision.
trait StatusReply {
    fn from_status(status: pb::PlanStatus, revision: u64) -> Self;
}

macro_rules! status_replies {
    ($($t:ident),* $(,)?) => {$(
        impl StatusReply for pb::$t {
            fn from_status(status: pb::PlanStatus, revision: u64) -> Self {
                pb::$t { status: Some(status), revision }
            }
        }
    )*};
}

status_replies!(
    EnterPlanModeResponse,
    ExitPlanModeResponse,
    GetPlanStatusResponse,
    ApprovePlanResponse,
    RejectPlanResponse,
    CompleteStepResponse,
    ApproveModificationResponse,
    RejectModificationResponse,
);

fn status_reply<T: StatusReply>(record: &PlanRecord, revision: u64) -> T {
    T::from_status(convert::plan_status(record), revision)
}

/// Implements the trait: each RPC opens its span, calls its service
/// function and maps the error once.
macro_rules! plan_rpcs {
    ($($name:ident => $inner:ident($req:ty) -> $resp:ty;)*) => {
        #[tonic::async_trait]
        impl PlanService for PlanApi {
            $(
                #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)))]
                async fn $name(&self, request: Request<$req>) -> Result<Response<$resp>, Status> {
                    let caller = caller(&request)?;
                    self.$inner(&caller, request.into_inner()).await.map(Response::new).map_err(status)
                }
            )*
        }
    };
}

plan_rpcs! {
    update_plan => update_plan(pb::UpdatePlanRequest) -> pb::UpdatePlanResponse;
    get_plan => get_plan(pb::GetPlanRequest) -> pb::GetPlanResponse;
    enter_plan_mode => enter(pb::EnterPlanModeRequest) -> pb::EnterPlanModeResponse;
    exit_plan_mode => exit(pb::ExitPlanModeRequest) -> pb::ExitPlanModeResponse;
    get_plan_status => status(pb::GetPlanStatusRequest) -> pb::GetPlanStatusResponse;
    approve_plan => approve_plan(pb::ApprovePlanRequest) -> pb::ApprovePlanResponse;
    reject_plan => reject_plan(pb::RejectPlanRequest) -> pb::RejectPlanResponse;
    complete_step => complete_step(pb::CompleteStepRequest) -> pb::CompleteStepResponse;
    complete_plan => complete_plan(pb::CompletePlanRequest) -> pb::CompletePlanResponse;
    modify_plan => modify(pb::ModifyPlanRequest) -> pb::ModifyPlanResponse;
    approve_modification => approve_modification(pb::ApproveModificationRequest) -> pb::ApproveModificationResponse;
    reject_modification => reject_modification(pb::RejectModificationRequest) -> pb::RejectModificationResponse;
    list_plan_history => history(pb::ListPlanHistoryRequest) -> pb::ListPlanHistoryResponse;
    check_action => check_action(pb::CheckActionRequest) -> pb::CheckActionResponse;
}
