//! `cairn.v1.PlanService`: the checklist and plan mode.
//!
//! Every plan write is a request converted into a `PlanWrite`
//! ([`convert::PlanRequest`]) and applied by the store in one durable
//! write; reads go through the store's access rules and hot plans. The
//! request's real size is counted against the commit budget.

use cairn_api as pb;
use cairn_api::plan_service_server::PlanService;
use cairn_core::command::{Command, PlanCommand, PlanOutcome, PlanWrite};
use cairn_core::error::{Error, Excerpt, Result};
use cairn_core::inbox::Awaiting;
use cairn_core::plan::{simple_task_hint, validate_update};
use cairn_core::plan_mode;
use cairn_store::records::PlanRecord;
use prost::Message as _;
use tracing::instrument;

use super::{State, rpcs};
use crate::auth::Authenticated;
use crate::convert::{self, PlanRequest};

/// Message of a stored `UpdatePlan`.
pub const PLAN_UPDATED: &str = "Plan updated";
/// Message of an `UpdatePlan` answered with the simple-task hint.
pub const PLAN_NOT_STORED: &str = "Plan not stored";

/// `ListPlanHistory` page size when the request sets none, and the most.
const DEFAULT_HISTORY_PAGE: usize = 10;
const MAX_HISTORY_PAGE: usize = 100;
const DEFAULT_INBOX_PAGE: usize = 50;
const MAX_INBOX_PAGE: usize = 500;
/// A history page ends once it holds this many bytes of records, so it
/// fits a default client's 4 MiB message limit.
const HISTORY_PAGE_BYTES: usize = 2 * 1024 * 1024;

/// The plan service.
#[derive(Clone, Debug)]
pub struct PlanApi {
    state: State,
}

impl PlanApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        PlanApi { state }
    }

    /// Applies a plan write in one durable commit: the stored plan, what
    /// the rule yielded, and the revision.
    async fn apply(
        &self,
        who: &Authenticated,
        write: PlanWrite,
        bytes: usize,
    ) -> Result<(PlanRecord, PlanOutcome, u64)> {
        let (applied, revision) = self
            .state
            .store
            .apply(&who.caller, Command::Plan(write), bytes)
            .await?;
        let (record, outcome) = applied.into_plan()?;
        Ok((record, outcome, revision))
    }

    /// A request whose answer is the plan's new status.
    async fn write<Req: PlanRequest, Resp: StatusReply>(
        &self,
        who: &Authenticated,
        req: Req,
    ) -> Result<Resp> {
        let bytes = req.encoded_len();
        let (record, _, revision) = self.apply(who, req.into_write()?, bytes).await?;
        Ok(status_reply(&record, revision))
    }

    async fn update_plan(
        &self,
        who: &Authenticated,
        req: pb::UpdatePlanRequest,
    ) -> Result<pb::UpdatePlanResponse> {
        let bytes = req.encoded_len();
        let pb::UpdatePlanRequest {
            session_id,
            explanation,
            plan,
            expected_revision,
            source,
        } = req;
        let policy = &self.state.policy;
        policy.limits.check_resource_id("session_id", &session_id)?;
        let update = convert::plan_update(explanation, plan, source);
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
        let write = PlanWrite {
            session_id,
            expected_revision,
            command: PlanCommand::Update(update),
        };
        let (record, _, revision) = self.apply(who, write, bytes).await?;
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
        who: &Authenticated,
        req: pb::GetPlanRequest,
    ) -> Result<pb::GetPlanResponse> {
        let (hot, revision) = self
            .state
            .store
            .read_plan(&who.caller, req.session_id)
            .await?;
        Ok(pb::GetPlanResponse {
            plan: Some(convert::plan(hot.record.clone())),
            revision,
        })
    }

    async fn status(
        &self,
        who: &Authenticated,
        req: pb::GetPlanStatusRequest,
    ) -> Result<pb::GetPlanStatusResponse> {
        let id = req.session_id;
        let (hot, revision) = self.state.store.read_plan(&who.caller, id.clone()).await?;
        let mut reply: pb::GetPlanStatusResponse = status_reply(&hot.record, revision);
        if let Some(status) = &mut reply.status {
            status.lease = self.state.store.lease(&id).as_ref().map(convert::lease_out);
        }
        Ok(reply)
    }

    async fn complete_plan(
        &self,
        who: &Authenticated,
        req: pb::CompletePlanRequest,
    ) -> Result<pb::CompletePlanResponse> {
        let bytes = req.encoded_len();
        let (record, outcome, revision) = self.apply(who, req.into_write()?, bytes).await?;
        let PlanOutcome::Completed(entry) = outcome else {
            return Err(Error::Internal(
                "CompletePlan yielded no history entry".into(),
            ));
        };
        Ok(pb::CompletePlanResponse {
            status: Some(convert::plan_status(&record)),
            entry: Some(convert::history_entry(*entry)),
            revision,
        })
    }

    async fn modify(
        &self,
        who: &Authenticated,
        req: pb::ModifyPlanRequest,
    ) -> Result<pb::ModifyPlanResponse> {
        let bytes = req.encoded_len();
        let (record, outcome, revision) = self.apply(who, req.into_write()?, bytes).await?;
        let PlanOutcome::Modified(modification) = outcome else {
            return Err(Error::Internal("ModifyPlan yielded no modification".into()));
        };
        Ok(pb::ModifyPlanResponse {
            modification: Some(convert::modification(*modification)),
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn history(
        &self,
        who: &Authenticated,
        req: pb::ListPlanHistoryRequest,
    ) -> Result<pb::ListPlanHistoryResponse> {
        let pb::ListPlanHistoryRequest {
            session_id,
            page_size,
            page_token,
        } = req;
        let limit = convert::page_size(page_size, DEFAULT_HISTORY_PAGE, MAX_HISTORY_PAGE)?;
        let from = if page_token.is_empty() {
            0
        } else {
            page_token
                .parse::<u64>()
                .map_err(|_| Error::invalid("page_token", "not a token this server gave"))?
        };
        let (page, revision) = self
            .state
            .store
            .read_history(&who.caller, session_id, from, limit, HISTORY_PAGE_BYTES)
            .await?;
        Ok(pb::ListPlanHistoryResponse {
            entries: page
                .entries
                .into_iter()
                .map(convert::history_entry)
                .collect(),
            revision,
            next_page_token: page.next.map(|n| n.to_string()).unwrap_or_default(),
        })
    }

    async fn inbox(
        &self,
        who: &Authenticated,
        req: pb::ListInboxRequest,
    ) -> Result<pb::ListInboxResponse> {
        let pb::ListInboxRequest {
            page_size,
            page_token,
        } = req;
        let limit = convert::page_size(page_size, DEFAULT_INBOX_PAGE, MAX_INBOX_PAGE)?;
        let after = if page_token.is_empty() {
            None
        } else {
            Some(Awaiting::from_token("page_token", &page_token)?)
        };
        let (page, revision) = self.state.store.inbox(&who.caller, after, limit).await?;
        Ok(pb::ListInboxResponse {
            items: page.items.into_iter().map(convert::inbox_item).collect(),
            next_page_token: page.next_after.map(|k| k.token()).unwrap_or_default(),
            revision,
        })
    }

    async fn check_action(
        &self,
        who: &Authenticated,
        req: pb::CheckActionRequest,
    ) -> Result<pb::CheckActionResponse> {
        let pb::CheckActionRequest {
            session_id,
            tool,
            action,
        } = req;
        let limits = &self.state.policy.limits;
        limits.check_required_text(|| "tool".into(), &tool)?;
        limits.check_text(|| "action".into(), &action)?;
        let (record, revision) = self
            .state
            .store
            .read_plan_mode(&who.caller, session_id)
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

rpcs! {
    impl PlanService for PlanApi {
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn update_plan(r: pb::UpdatePlanRequest) -> pb::UpdatePlanResponse => update_plan;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn get_plan(r: pb::GetPlanRequest) -> pb::GetPlanResponse => get_plan;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn enter_plan_mode(r: pb::EnterPlanModeRequest) -> pb::EnterPlanModeResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn exit_plan_mode(r: pb::ExitPlanModeRequest) -> pb::ExitPlanModeResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn get_plan_status(r: pb::GetPlanStatusRequest) -> pb::GetPlanStatusResponse => status;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn approve_plan(r: pb::ApprovePlanRequest) -> pb::ApprovePlanResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn reject_plan(r: pb::RejectPlanRequest) -> pb::RejectPlanResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn complete_step(r: pb::CompleteStepRequest) -> pb::CompleteStepResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn complete_plan(r: pb::CompletePlanRequest) -> pb::CompletePlanResponse => complete_plan;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn modify_plan(r: pb::ModifyPlanRequest) -> pb::ModifyPlanResponse => modify;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn approve_modification(r: pb::ApproveModificationRequest) -> pb::ApproveModificationResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn reject_modification(r: pb::RejectModificationRequest) -> pb::RejectModificationResponse => write;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn list_plan_history(r: pb::ListPlanHistoryRequest) -> pb::ListPlanHistoryResponse => history;
        #[instrument(skip_all, fields(session_id = %Excerpt(&r.get_ref().session_id)))]
        fn check_action(r: pb::CheckActionRequest) -> pb::CheckActionResponse => check_action;
        #[instrument(skip_all)]
        fn list_inbox(r: pb::ListInboxRequest) -> pb::ListInboxResponse => inbox;
    }
}
