//! `cairn.v1.PlanService`: the checklist and plan mode.

use prost::Message as _;
use tonic::{Request, Response, Status};
use tracing::instrument;

use crate::error::Excerpt;

use super::{State, convert};
use crate::domain::plan::{apply_update, simple_task_hint, validate_update};
use crate::domain::plan_mode::{self, plan_id};
use crate::domain::{Micros, SessionPlan};
use crate::error::{Error, Result};
use crate::pb;
use crate::pb::plan_service_server::PlanService;
use crate::store::ops;
use crate::store::records::PlanRecord;

/// Message of a stored `UpdatePlan` (seed 1).
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

impl PlanApi {
    /// A service over shared state.
    pub fn new(state: State) -> Self {
        PlanApi { state }
    }

    /// Runs a plan-mode mutation and answers with the new status.
    async fn mutate<R, F>(
        &self,
        bytes: usize,
        session_id: String,
        expected: Option<u64>,
        create: bool,
        change: F,
    ) -> Result<(R, PlanRecord, u64)>
    where
        R: Send + 'static,
        F: FnOnce(
                &mut SessionPlan,
                Micros,
                &crate::domain::Limits,
            ) -> Result<(R, Vec<plan_mode::HistoryEntry>)>
            + Send
            + 'static,
    {
        let policy = self.state.policy.clone();
        self.state
            .store
            .write_sized(bytes, move |ctx| {
                ops::mutate_plan(
                    ctx,
                    &session_id,
                    expected,
                    create,
                    &policy.limits,
                    |plan, now| change(plan, now, &policy.limits),
                )
            })
            .await
    }

    async fn update_plan_inner(
        &self,
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
        let ((), record, revision) = self
            .mutate(
                bytes,
                session_id,
                expected_revision,
                true,
                move |plan, _, _| {
                    plan.checklist = apply_update(&plan.checklist, update);
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        let checklist = record.plan.checklist;
        Ok(pb::UpdatePlanResponse {
            message: PLAN_UPDATED.into(),
            explanation: checklist.explanation,
            plan: checklist.items.into_iter().map(Into::into).collect(),
            stored: true,
            hint: String::new(),
            revision,
        })
    }

    /// A session's plan and the current revision, from one snapshot.
    async fn read_plan(&self, session_id: String) -> Result<(PlanRecord, u64)> {
        self.state
            .policy
            .limits
            .check_resource_id("session_id", &session_id)?;
        self.state
            .store
            .read(move |v| Ok((ops::get_plan(v, &session_id)?, v.revision()?)))
            .await
    }

    async fn get_plan_inner(&self, req: pb::GetPlanRequest) -> Result<pb::GetPlanResponse> {
        let pb::GetPlanRequest { session_id } = req;
        let (record, revision) = self.read_plan(session_id).await?;
        Ok(pb::GetPlanResponse {
            plan: Some(convert::plan(record)),
            revision,
        })
    }
}

fn random_suffix() -> String {
    (0..6)
        .map(|_| fastrand::alphanumeric().to_ascii_lowercase())
        .collect()
}

/// Implements the trait: each RPC opens its span, calls its inner function
/// and maps the domain error once.
macro_rules! plan_rpcs {
    ($($name:ident => $inner:ident($req:ty) -> $resp:ty;)*) => {
        #[tonic::async_trait]
        impl PlanService for PlanApi {
            $(
                #[instrument(skip_all, fields(session_id = %Excerpt(&request.get_ref().session_id)), err)]
                async fn $name(&self, request: Request<$req>) -> Result<Response<$resp>, Status> {
                    Ok(Response::new(self.$inner(request.into_inner()).await?))
                }
            )*
        }
    };
}

plan_rpcs! {
    update_plan => update_plan_inner(pb::UpdatePlanRequest) -> pb::UpdatePlanResponse;
    get_plan => get_plan_inner(pb::GetPlanRequest) -> pb::GetPlanResponse;
    enter_plan_mode => enter_inner(pb::EnterPlanModeRequest) -> pb::EnterPlanModeResponse;
    exit_plan_mode => exit_inner(pb::ExitPlanModeRequest) -> pb::ExitPlanModeResponse;
    get_plan_status => status_inner(pb::GetPlanStatusRequest) -> pb::GetPlanStatusResponse;
    approve_plan => approve_inner(pb::ApprovePlanRequest) -> pb::ApprovePlanResponse;
    reject_plan => reject_inner(pb::RejectPlanRequest) -> pb::RejectPlanResponse;
    complete_step => complete_step_inner(pb::CompleteStepRequest) -> pb::CompleteStepResponse;
    complete_plan => complete_plan_inner(pb::CompletePlanRequest) -> pb::CompletePlanResponse;
    modify_plan => modify_inner(pb::ModifyPlanRequest) -> pb::ModifyPlanResponse;
    approve_modification => approve_modification_inner(pb::ApproveModificationRequest) -> pb::ApproveModificationResponse;
    reject_modification => reject_modification_inner(pb::RejectModificationRequest) -> pb::RejectModificationResponse;
    list_plan_history => history_inner(pb::ListPlanHistoryRequest) -> pb::ListPlanHistoryResponse;
    check_action => check_action_inner(pb::CheckActionRequest) -> pb::CheckActionResponse;
}

impl PlanApi {
    async fn enter_inner(
        &self,
        req: pb::EnterPlanModeRequest,
    ) -> Result<pb::EnterPlanModeResponse> {
        let pb::EnterPlanModeRequest {
            session_id,
            goal,
            scope,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                true,
                move |plan, _, limits| {
                    plan.enter(goal, scope, limits)?;
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        Ok(pb::EnterPlanModeResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn exit_inner(&self, req: pb::ExitPlanModeRequest) -> Result<pb::ExitPlanModeResponse> {
        let bytes = req.encoded_len();
        let pb::ExitPlanModeRequest {
            session_id,
            plan,
            expected_revision,
        } = req;
        let proposed = plan.map(TryInto::try_into).transpose()?.unwrap_or_default();
        let suffix = random_suffix();
        let ((), record, revision) = self
            .mutate(
                bytes,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| {
                    plan.exit(proposed, plan_id(now, &suffix), now, limits)?;
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        Ok(pb::ExitPlanModeResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn status_inner(
        &self,
        req: pb::GetPlanStatusRequest,
    ) -> Result<pb::GetPlanStatusResponse> {
        let pb::GetPlanStatusRequest { session_id } = req;
        let (record, revision) = self.read_plan(session_id).await?;
        Ok(pb::GetPlanStatusResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    pub(crate) async fn approve_inner(
        &self,
        req: pb::ApprovePlanRequest,
    ) -> Result<pb::ApprovePlanResponse> {
        let pb::ApprovePlanRequest {
            session_id,
            approver,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| {
                    let superseded = plan.approve(approver, now, limits)?;
                    Ok(((), superseded.into_iter().collect()))
                },
            )
            .await?;
        Ok(pb::ApprovePlanResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    pub(crate) async fn reject_inner(
        &self,
        req: pb::RejectPlanRequest,
    ) -> Result<pb::RejectPlanResponse> {
        let pb::RejectPlanRequest {
            session_id,
            reason,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| Ok(((), vec![plan.reject(reason, now, limits)?])),
            )
            .await?;
        Ok(pb::RejectPlanResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn complete_step_inner(
        &self,
        req: pb::CompleteStepRequest,
    ) -> Result<pb::CompleteStepResponse> {
        let pb::CompleteStepRequest {
            session_id,
            step_id,
            verification_result,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| {
                    plan.complete_step(step_id, verification_result, now, limits)?;
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        Ok(pb::CompleteStepResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn complete_plan_inner(
        &self,
        req: pb::CompletePlanRequest,
    ) -> Result<pb::CompletePlanResponse> {
        let pb::CompletePlanRequest {
            session_id,
            summary,
            deviations,
            expected_revision,
        } = req;
        let (entry, record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| {
                    let entry = plan.complete_plan(summary, deviations, now, limits)?;
                    Ok((entry.clone(), vec![entry]))
                },
            )
            .await?;
        Ok(pb::CompletePlanResponse {
            status: Some(convert::plan_status(&record)),
            entry: Some(convert::history_entry(entry)),
            revision,
        })
    }

    async fn modify_inner(&self, req: pb::ModifyPlanRequest) -> Result<pb::ModifyPlanResponse> {
        let pb::ModifyPlanRequest {
            session_id,
            step_id,
            reason,
            new_description,
            new_files,
            new_verification,
            expected_revision,
        } = req;
        let (modification, record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, now, limits| {
                    let m = plan
                        .modify(
                            step_id,
                            reason,
                            new_description,
                            new_files,
                            new_verification,
                            now,
                            limits,
                        )?
                        .clone();
                    Ok((m, Vec::new()))
                },
            )
            .await?;
        Ok(pb::ModifyPlanResponse {
            modification: Some(convert::modification(modification)),
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn approve_modification_inner(
        &self,
        req: pb::ApproveModificationRequest,
    ) -> Result<pb::ApproveModificationResponse> {
        let pb::ApproveModificationRequest {
            session_id,
            modification_id,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, _, _| {
                    plan.approve_modification(modification_id)?;
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        Ok(pb::ApproveModificationResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn reject_modification_inner(
        &self,
        req: pb::RejectModificationRequest,
    ) -> Result<pb::RejectModificationResponse> {
        let pb::RejectModificationRequest {
            session_id,
            modification_id,
            expected_revision,
        } = req;
        let ((), record, revision) = self
            .mutate(
                0,
                session_id,
                expected_revision,
                false,
                move |plan, _, _| {
                    plan.reject_modification(modification_id)?;
                    Ok(((), Vec::new()))
                },
            )
            .await?;
        Ok(pb::RejectModificationResponse {
            status: Some(convert::plan_status(&record)),
            revision,
        })
    }

    async fn history_inner(
        &self,
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
        let ((entries, next), revision) = self
            .state
            .store
            .read(move |v| {
                ops::require_session(v, &session_id)?;
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

    async fn check_action_inner(
        &self,
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
        let (record, revision) = self
            .state
            .store
            .read(move |v| Ok((ops::plan_or_default(v, &session_id)?, v.revision()?)))
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
