//! The tools of one agent, each a thin call to the Cairn server.

use cairn_api as pb;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::sync::OnceCell;

use super::args::{
    CheckActionArgs, InboxDecideArgs, McpArgs, NoArgs, PlanCompleteArgs, PlanEnterArgs,
    PlanExitArgs, PlanModifyArgs, PlanRejectArgs, StepCompleteArgs, TodoWriteArgs, UpdatePlanArgs,
    WaitArgs,
};
use crate::conn::{Api, CallTimeout};
use crate::view;

/// The MCP server of one agent.
#[derive(Clone)]
pub struct CairnTools {
    args: McpArgs,
    session_id: String,
    channel: Api,
    /// The agent's session is created (under its parent) once, on first use.
    ensured: std::sync::Arc<OnceCell<()>>,
    /// Told once the session exists, so the lease is taken at once.
    created: std::sync::Arc<tokio::sync::Notify>,
    /// Renew the lease before each call (MCP over HTTP, where no process
    /// lives on between calls to renew it).
    renew_per_call: bool,
    tool_router: ToolRouter<Self>,
}

// The helpers return the tools' own result type so each tool ends in one call.
#[allow(clippy::unnecessary_wraps)]
fn ok_json(value: &Value) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(
        value.to_string(),
    )]))
}

#[allow(clippy::unnecessary_wraps)]
fn ok_text(text: impl Into<String>) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// Arguments the tool cannot use, as the tool's result.
#[allow(clippy::unnecessary_wraps)]
fn bad_arguments(message: String) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::error(vec![ContentBlock::text(message)]))
}

/// A failed call as the tool's result: the model reads the server's exact
/// message and can correct itself; the process carries on.
#[allow(clippy::unnecessary_wraps)]
fn tool_error(status: &tonic::Status) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        status.message().to_owned(),
    )]))
}

#[tool_router]
impl CairnTools {
    /// The server for one agent, over a (lazily connecting) channel.
    pub fn new(args: McpArgs, channel: Api) -> Self {
        Self::sharing(args, channel, std::sync::Arc::default())
    }

    /// The same, with whether its session exists already known to others
    /// (MCP over HTTP makes tools for every request: without it, each call
    /// would create the session again).
    pub fn sharing(args: McpArgs, channel: Api, ensured: std::sync::Arc<OnceCell<()>>) -> Self {
        let session_id = args
            .session_id
            .clone()
            .unwrap_or_else(|| args.agent_id.clone());
        CairnTools {
            args,
            session_id,
            channel,
            ensured,
            created: std::sync::Arc::default(),
            renew_per_call: false,
            tool_router: Self::tool_router(),
        }
    }

    /// The same tools, renewing the session's lease on every call.
    #[must_use]
    pub fn renewing_per_call(mut self) -> Self {
        self.renew_per_call = true;
        self
    }

    /// Renews (or with `finished`, releases) the session's lease.
    pub async fn keep_alive(&self, finished: bool) -> Result<pb::KeepAliveResponse, tonic::Status> {
        let mut sessions =
            pb::session_service_client::SessionServiceClient::new(self.channel.clone());
        sessions
            .keep_alive(pb::KeepAliveRequest {
                session_id: self.session_id.clone(),
                ttl: self
                    .args
                    .lease_ttl
                    .and_then(|d| prost_types::Duration::try_from(d).ok()),
                grace: None,
                finished,
            })
            .await
            .map(tonic::Response::into_inner)
    }

    /// Renews the lease for as long as the process runs: every third of
    /// its TTL, at once when the session comes to exist, and again soon
    /// after a failure (the server restarting, say).
    pub async fn renew_forever(&self) {
        loop {
            let pause = match self.keep_alive(false).await {
                Ok(r) => r
                    .lease
                    .and_then(|l| l.ttl)
                    .and_then(|t| Duration::try_from(t).ok())
                    .map_or(Duration::from_secs(20), |ttl| ttl / 3)
                    .clamp(Duration::from_millis(200), Duration::from_secs(20)),
                // Not yet created: the first tool call creates it.
                Err(e) if e.code() == tonic::Code::NotFound => Duration::from_secs(30),
                // The server restarting, say: soon again.
                Err(_) => Duration::from_secs(1),
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = self.created.notified() => {}
            }
        }
    }

    /// At the end of a clean exit: releases the lease as FINISHED when the
    /// session's plan is complete. An agent that exits (or dies) mid-plan
    /// keeps its lease, to stall and be lost.
    pub async fn release_if_complete(&self) {
        let mut plans = self.plans();
        let Ok(plan) = plans
            .get_plan(pb::GetPlanRequest {
                session_id: self.session_id.clone(),
            })
            .await
        else {
            return;
        };
        let items = plan.into_inner().plan.map(|p| p.items).unwrap_or_default();
        let at = view::progress(&items);
        if at.total > 0 && at.done == at.total {
            let _ = self.keep_alive(true).await;
        }
    }

    fn plans(&self) -> pb::plan_service_client::PlanServiceClient<Api> {
        pb::plan_service_client::PlanServiceClient::new(self.channel.clone())
    }

    fn todos(&self) -> pb::todo_service_client::TodoServiceClient<Api> {
        pb::todo_service_client::TodoServiceClient::new(self.channel.clone())
    }

    /// Creates the agent's session under its parent the first time a tool
    /// needs it; an existing session is fine.
    async fn ensure_session(&self) -> Result<(), tonic::Status> {
        self.ensured
            .get_or_try_init(|| async {
                let mut sessions =
                    pb::session_service_client::SessionServiceClient::new(self.channel.clone());
                let created = sessions
                    .create_session(pb::CreateSessionRequest {
                        session: Some(pb::Session {
                            session_id: self.session_id.clone(),
                            agent_id: self.args.agent_id.clone(),
                            parent_session_id: self
                                .args
                                .parent_session_id
                                .clone()
                                .unwrap_or_default(),
                            ..pb::Session::default()
                        }),
                    })
                    .await;
                match created {
                    Ok(_) => {}
                    Err(e) if e.code() == tonic::Code::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                self.created.notify_one();
                Ok(())
            })
            .await
            .copied()?;
        if self.renew_per_call {
            // A renewal that fails does not fail the call it came with.
            let _ = self.keep_alive(false).await;
        }
        Ok(())
    }

    #[tool(
        name = "update_plan",
        annotations(
            title = "Update the plan checklist",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        ),
        description = "Update your Cairn plan (this server's checklist, durable and visible to your orchestrator, not a built-in plan tool of the same name): the whole ordered list of steps, each pending, in_progress or completed. At most one step can be in_progress at a time; statuses may skip ahead or go back. Use it for complex work (4+ distinct steps); for simpler tasks it answers with a hint to just do the work. Explain in `explanation` why the plan changes."
    )]
    async fn update_plan(
        &self,
        Parameters(args): Parameters<UpdatePlanArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = match args.request(self.session_id.clone()) {
            Ok(req) => req,
            Err(e) => return bad_arguments(e),
        };
        match self.plans().update_plan(req).await {
            Ok(r) => {
                let r = r.into_inner();
                if !r.stored {
                    return ok_text(r.hint);
                }
                ok_json(&json!({
                    "message": r.message,
                    "explanation": r.explanation,
                    "plan": r.plan.iter().map(|i| json!({ "step": i.step, "status": view::step_status_name(i.status()) })).collect::<Vec<_>>(),
                }))
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "todo_read",
        annotations(
            title = "Read your todo list",
            read_only_hint = true,
            open_world_hint = false
        ),
        description = "Read your persistent todo list: every item with its id, content, status, priority and timestamps. The list belongs to you, not to a session, and survives restarts."
    )]
    async fn todo_read(
        &self,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, McpError> {
        let req = pb::ReadTodosRequest {
            agent_id: self.args.agent_id.clone(),
        };
        match self.todos().read_todos(req).await {
            Ok(r) => ok_json(&view::todo_json(&r.into_inner().list.unwrap_or_default())),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "todo_write",
        annotations(
            title = "Replace your todo list",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = true,
            open_world_hint = false
        ),
        description = "Replace your whole todo list (a full replace, not a patch). Only one item may be in_progress. Items you leave out are kept and marked completed; if every item you write is completed, the list starts clean. Use it only for genuinely complex work (3+ distinct steps) and mark items completed as soon as they are done."
    )]
    async fn todo_write(
        &self,
        Parameters(args): Parameters<TodoWriteArgs>,
    ) -> Result<CallToolResult, McpError> {
        let todos = match view::todo_items(args.todos) {
            Ok(todos) => todos,
            Err(e) => return bad_arguments(e),
        };
        let req = pb::WriteTodosRequest {
            agent_id: self.args.agent_id.clone(),
            todos,
            expected_revision: None,
        };
        match self.todos().write_todos(req).await {
            Ok(r) => ok_json(&view::todo_json(&r.into_inner().list.unwrap_or_default())),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "plan_enter",
        annotations(
            title = "Enter plan mode",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Enter plan mode for complex work (building a feature, refactoring, multi-file changes): write tools (write_file, cron create/delete) are blocked until your plan is approved. Explore with read-only tools, then submit the plan with this server's plan_exit tool. Skip plan mode for simple tasks."
    )]
    async fn plan_enter(
        &self,
        Parameters(args): Parameters<PlanEnterArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::EnterPlanModeRequest {
            session_id: self.session_id.clone(),
            goal: args.goal,
            scope: args.scope.unwrap_or_default(),
            expected_revision: None,
        };
        self.status_reply(
            self.plans()
                .enter_plan_mode(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_exit",
        annotations(
            title = "Submit the plan for approval",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Leave plan mode and present the implementation plan (summary, approach, alternatives, steps with files, dependencies and verification, risks, files, tests, complexity) for the user's approval. It does not start execution: wait for approval."
    )]
    async fn plan_exit(
        &self,
        Parameters(args): Parameters<PlanExitArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let p = args.plan;
        let complexity = match view::parse_complexity(
            "plan.estimated_complexity",
            p.estimated_complexity.as_deref(),
        ) {
            Ok(c) => c,
            Err(e) => return bad_arguments(e),
        };
        let plan = pb::ImplementationPlan {
            summary: p.summary,
            approach: p.approach,
            alternatives_considered: p.alternatives_considered,
            steps: p
                .steps
                .into_iter()
                .map(|s| pb::ImplementationStep {
                    id: s.id,
                    description: s.description,
                    files: s.files,
                    depends_on: s.depends_on,
                    verification: s.verification,
                })
                .collect(),
            risks: p.risks,
            files_to_create: p.files_to_create,
            files_to_modify: p.files_to_modify,
            tests_to_write: p.tests_to_write,
            estimated_complexity: complexity.into(),
        };
        let req = pb::ExitPlanModeRequest {
            session_id: self.session_id.clone(),
            plan: Some(plan),
            expected_revision: None,
            deadline: None,
        };
        self.status_reply(
            self.plans()
                .exit_plan_mode(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_status",
        annotations(
            title = "Show plan mode status",
            read_only_hint = true,
            open_world_hint = false
        ),
        description = "Show plan mode: the mode, the goal, the plan awaiting approval, and the active plan's progress and current step."
    )]
    async fn plan_status(
        &self,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::GetPlanStatusRequest {
            session_id: self.session_id.clone(),
        };
        // The session exists (ensured above); one that never planned reads
        // as normal mode.
        self.status_reply(
            self.plans()
                .get_plan_status(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_approve",
        annotations(
            title = "Approve the pending plan",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Approve the plan awaiting approval and start executing it. Call it when the user approves."
    )]
    async fn plan_approve(
        &self,
        Parameters(_): Parameters<NoArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::ApprovePlanRequest {
            session_id: self.session_id.clone(),
            approver: "user".into(),
            expected_revision: None,
        };
        self.status_reply(
            self.plans()
                .approve_plan(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_reject",
        annotations(
            title = "Reject the pending plan",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Reject the plan awaiting approval and return to normal mode."
    )]
    async fn plan_reject(
        &self,
        Parameters(args): Parameters<PlanRejectArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::RejectPlanRequest {
            session_id: self.session_id.clone(),
            reason: args.reason.unwrap_or_default(),
            expected_revision: None,
        };
        self.status_reply(
            self.plans()
                .reject_plan(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_step_complete",
        annotations(
            title = "Complete a plan step",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Mark a step of the approved plan completed, with the output of its verification. A step can only be completed after the steps it depends on."
    )]
    async fn plan_step_complete(
        &self,
        Parameters(args): Parameters<StepCompleteArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::CompleteStepRequest {
            session_id: self.session_id.clone(),
            step_id: args.step_id,
            verification_result: args.verification_result,
            expected_revision: None,
        };
        self.status_reply(
            self.plans()
                .complete_step(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_complete",
        annotations(
            title = "Complete the active plan",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Mark the whole plan completed with a summary. If steps were left undone, list the deviations from the plan."
    )]
    async fn plan_complete(
        &self,
        Parameters(args): Parameters<PlanCompleteArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::CompletePlanRequest {
            session_id: self.session_id.clone(),
            summary: args.summary,
            deviations: args.deviations,
            expected_revision: None,
        };
        self.status_reply(
            self.plans()
                .complete_plan(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "plan_modify",
        annotations(
            title = "Request a change to a step",
            read_only_hint = false,
            destructive_hint = false,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Request a change to a step of the approved plan (new description, files or verification) with the reason. Nothing changes until the user approves the modification."
    )]
    async fn plan_modify(
        &self,
        Parameters(args): Parameters<PlanModifyArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::ModifyPlanRequest {
            session_id: self.session_id.clone(),
            step_id: args.step_id,
            reason: args.reason,
            new_description: args.new_description,
            new_files: args.new_files,
            new_verification: args.new_verification,
            expected_revision: None,
            deadline: None,
        };
        self.status_reply(
            self.plans()
                .modify_plan(req)
                .await
                .map(|r| r.into_inner().status),
        )
    }

    #[tool(
        name = "wait",
        annotations(
            title = "Wait for sub-agents",
            read_only_hint = true,
            open_world_hint = false
        ),
        description = "Wait until your sub-agents have completed their plans (every session under yours, or the given session ids), or until the timeout, or until one of them is lost (its agent died: the answer names it and its step, so that you can restart it or reassign its work). Returns whether they finished and each plan's progress."
    )]
    async fn wait(
        &self,
        Parameters(args): Parameters<WaitArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let target = match args.session_ids {
            Some(ids) if !ids.is_empty() => {
                pb::wait_request::Target::SessionIds(pb::SessionIds { session_ids: ids })
            }
            _ => pb::wait_request::Target::SessionTree(self.session_id.clone()),
        };
        let seconds = args.timeout_seconds.unwrap_or(300).min(24 * 3600);
        let req = pb::WaitRequest {
            target: Some(target),
            condition: pb::WaitCondition::AllPlansCompleted.into(),
            timeout: Some(prost_types::Duration {
                seconds: i64::try_from(seconds).unwrap_or(300),
                nanos: 0,
            }),
            fail_fast: Some(true),
        };
        let mut client = pb::watch_service_client::WatchServiceClient::new(self.channel.clone());
        let mut req = tonic::Request::new(req);
        req.extensions_mut().insert(CallTimeout(
            Duration::from_secs(seconds) + self.args.call_timeout,
        ));
        match client.wait(req).await {
            Ok(r) => {
                let r = r.into_inner();
                let now = view::now_micros();
                ok_json(&json!({
                    "satisfied": r.satisfied,
                    "lost": r.lost.iter().map(|l| view::lost_sentence(l, now)).collect::<Vec<_>>(),
                    "sessions": r.plans.iter().map(|p| {
                        let at = view::progress(&p.items);
                        json!({
                            "session_id": p.session_id,
                            "completed": at.done,
                            "total": at.total,
                            "current_step": at.current,
                        })
                    }).collect::<Vec<_>>(),
                }))
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "inbox",
        annotations(
            title = "List what awaits your approval",
            read_only_hint = true,
            open_world_hint = false
        ),
        description = "List every plan and plan modification awaiting your approval, across all session trees you may approve, oldest first: each with its session, agent, goal, summary or requested change, and how long it has waited. Decide on one with inbox_decide."
    )]
    async fn inbox(&self, Parameters(_): Parameters<NoArgs>) -> Result<CallToolResult, McpError> {
        let req = pb::ListInboxRequest {
            page_size: 100,
            page_token: String::new(),
        };
        match self.plans().list_inbox(req).await {
            Ok(r) => {
                let r = r.into_inner();
                let now = view::now_micros();
                ok_json(&json!({
                    "items": r.items.iter().map(|i| view::inbox_item_json(i, now)).collect::<Vec<_>>(),
                    "more": !r.next_page_token.is_empty(),
                }))
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "inbox_decide",
        annotations(
            title = "Approve or reject an item of your inbox",
            read_only_hint = false,
            destructive_hint = true,
            idempotent_hint = false,
            open_world_hint = false
        ),
        description = "Approve or reject a plan (or, with modification_id, a plan modification) awaiting your approval in another session, as listed by inbox. A rejection's reason goes back to the agent that asked. You cannot decide on what you submitted yourself."
    )]
    async fn inbox_decide(
        &self,
        Parameters(args): Parameters<InboxDecideArgs>,
    ) -> Result<CallToolResult, McpError> {
        let verdict = match args.decision.as_str() {
            "approve" => view::Verdict::Approve {
                approver: self.args.agent_id.clone(),
            },
            "reject" => view::Verdict::Reject {
                reason: args.reason.unwrap_or_default(),
            },
            other => {
                return tool_error(&tonic::Status::invalid_argument(format!(
                    "decision: {:?} is not one of approve or reject",
                    other.chars().take(40).collect::<String>()
                )));
            }
        };
        let status = view::decide(
            &mut self.plans(),
            args.session_id,
            args.modification_id,
            verdict,
        )
        .await;
        self.status_reply(status)
    }

    #[tool(
        name = "check_action",
        annotations(
            title = "Check whether an action is allowed",
            read_only_hint = true,
            open_world_hint = false
        ),
        description = "Ask whether a tool may run now. While planning or awaiting approval, write tools are blocked; the answer says why."
    )]
    async fn check_action(
        &self,
        Parameters(args): Parameters<CheckActionArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::CheckActionRequest {
            session_id: self.session_id.clone(),
            tool: args.tool,
            action: args.action.unwrap_or_default(),
        };
        match self.plans().check_action(req).await {
            Ok(r) => {
                let r = r.into_inner();
                ok_json(&json!({ "allowed": r.allowed, "reason": r.reason }))
            }
            Err(e) => tool_error(&e),
        }
    }
}

impl CairnTools {
    fn status_reply(
        &self,
        result: Result<Option<pb::PlanStatus>, tonic::Status>,
    ) -> Result<CallToolResult, McpError> {
        match result {
            Ok(status) => ok_json(&view::plan_status_json(&status.unwrap_or_else(|| {
                pb::PlanStatus {
                    session_id: self.session_id.clone(),
                    ..pb::PlanStatus::default()
                }
            }))),
            Err(e) => tool_error(&e),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for CairnTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("cairn", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Cairn keeps your plan and todo list durable and visible to your orchestrator. \
                 The tools named here are this server's (your client may show them with a prefix, \
                 such as mcp__cairn__update_plan), not built-in tools of the same name. \
                 For complex work, keep a plan with Cairn's update_plan (one step in_progress at a time), \
                 or use Cairn's plan mode (plan_enter, plan_exit, then wait for approval) before writing. \
                 Track multi-step work with Cairn's todo_write.",
            )
    }
}
