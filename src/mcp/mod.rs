//! `cairn mcp`: the seed tools over the Model Context Protocol (stdio).
//!
//! One process serves one agent: it talks gRPC to a running Cairn server on
//! the agent's behalf, with the agent's session and agent ids fixed by flags,
//! and exposes the tools by their seed names and shapes (`update_plan`,
//! `todo_read`, `todo_write`, `plan_enter` … `plan_modify`, `wait`,
//! `check_action`). Rule violations and server errors come back as tool
//! errors carrying the server's exact message; nothing an agent sends can
//! crash the process.

use std::time::Duration;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{
    ErrorData as McpError, ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::OnceCell;
use tonic::transport::{Channel, Endpoint};

mod deadline;
mod stdio;

use deadline::{CallTimeout, Deadline};

use crate::api::convert::micros;
use crate::domain::rfc3339;
use crate::pb;

/// `cairn mcp` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// The Cairn server to talk to.
    #[arg(long, env = "CAIRN_SERVER", default_value = "http://127.0.0.1:50051")]
    pub server: String,
    /// The agent this process acts for (owner of the todo list).
    #[arg(long, env = "CAIRN_AGENT_ID")]
    pub agent_id: String,
    /// The agent's session (its plan); defaults to the agent id.
    #[arg(long, env = "CAIRN_SESSION_ID")]
    pub session_id: Option<String>,
    /// The orchestrator's session this agent's session belongs under.
    #[arg(long, env = "CAIRN_PARENT_SESSION_ID")]
    pub parent_session_id: Option<String>,
    /// How long one call to the server may take before the tool fails
    /// (`wait` gets its own timeout on top).
    #[arg(long, env = "CAIRN_CALL_TIMEOUT", default_value = "30s", value_parser = crate::config::parse_duration)]
    pub call_timeout: Duration,
}

/// Serves MCP on stdin/stdout until the client closes it.
pub async fn run(args: McpArgs) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let channel = Endpoint::from_shared(args.server.clone())?
        .connect_timeout(Duration::from_secs(5))
        .connect_lazy();
    let server = CairnTools::new(args, channel);
    let (transport, pumps) = stdio::filtered(tokio::io::stdin(), tokio::io::stdout());
    let running = server.serve(transport).await?;
    running.waiting().await?;
    pumps.finish().await;
    Ok(())
}

/// One item of `update_plan`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanStepArg {
    /// What to do: specific and verifiable.
    pub step: String,
    /// "pending", "in_progress" or "completed".
    pub status: String,
}

/// Arguments of `update_plan`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct UpdatePlanArgs {
    /// Why the plan changes now.
    #[serde(default)]
    pub explanation: Option<String>,
    /// The whole plan, in order.
    pub plan: Vec<PlanStepArg>,
}

/// One item of `todo_write`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TodoArg {
    /// Unique id within the list.
    pub id: String,
    /// What to do.
    pub content: String,
    /// "pending", "in_progress" or "completed".
    pub status: String,
    /// "high", "medium" or "low" (default medium).
    #[serde(default)]
    pub priority: Option<String>,
}

/// Arguments of `todo_write`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct TodoWriteArgs {
    /// The complete list (a full replace, not a patch).
    pub todos: Vec<TodoArg>,
}

/// No arguments.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct NoArgs {}

/// Arguments of `plan_enter`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanEnterArgs {
    /// What the agent plans to build or change.
    pub goal: String,
    /// Limit exploration to a directory or module.
    #[serde(default)]
    pub scope: Option<String>,
}

/// One step of `plan_exit`'s plan.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StepArg {
    /// Unique positive id.
    pub id: u32,
    /// What the step does.
    pub description: String,
    /// Files it touches.
    #[serde(default)]
    pub files: Vec<String>,
    /// Ids of steps that must be completed first.
    #[serde(default)]
    pub depends_on: Vec<u32>,
    /// How to verify it.
    #[serde(default)]
    pub verification: String,
}

/// The implementation plan of `plan_exit`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanArg {
    /// What the plan achieves.
    pub summary: String,
    /// How.
    #[serde(default)]
    pub approach: String,
    /// Other approaches weighed.
    #[serde(default)]
    pub alternatives_considered: Vec<String>,
    /// Ordered steps with files, dependencies and verification.
    pub steps: Vec<StepArg>,
    /// Known risks and mitigations.
    #[serde(default)]
    pub risks: Vec<String>,
    /// Files to create.
    #[serde(default)]
    pub files_to_create: Vec<String>,
    /// Files to modify.
    #[serde(default)]
    pub files_to_modify: Vec<String>,
    /// Tests to write.
    #[serde(default)]
    pub tests_to_write: Vec<String>,
    /// "small", "medium" or "large".
    #[serde(default)]
    pub estimated_complexity: Option<String>,
}

/// Arguments of `plan_exit`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanExitArgs {
    /// The implementation plan for the user to review.
    pub plan: PlanArg,
}

/// Arguments of `plan_reject`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanRejectArgs {
    /// Why the plan is rejected.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Arguments of `plan_step_complete`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct StepCompleteArgs {
    /// The step to mark completed.
    pub step_id: u32,
    /// Output of the step's verification command.
    pub verification_result: String,
}

/// Arguments of `plan_complete`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanCompleteArgs {
    /// What was accomplished.
    pub summary: String,
    /// Departures from the plan; required when steps are left.
    #[serde(default)]
    pub deviations: Vec<String>,
}

/// Arguments of `plan_modify`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct PlanModifyArgs {
    /// The step to change.
    pub step_id: u32,
    /// Why.
    pub reason: String,
    /// The new description.
    pub new_description: String,
    /// The new file list.
    #[serde(default)]
    pub new_files: Vec<String>,
    /// The new verification command.
    #[serde(default)]
    pub new_verification: Option<String>,
}

/// Arguments of `wait`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct WaitArgs {
    /// Sessions to wait for; default: every session under this agent's.
    #[serde(default)]
    pub session_ids: Option<Vec<String>>,
    /// Give up after this many seconds (default 300).
    #[serde(default)]
    pub timeout_seconds: Option<u64>,
}

/// Arguments of `check_action`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct CheckActionArgs {
    /// The tool about to run, e.g. "write_file".
    pub tool: String,
    /// Its action, for tools with several, e.g. "create".
    #[serde(default)]
    pub action: Option<String>,
}

/// The MCP server of one agent.
#[derive(Clone)]
pub struct CairnTools {
    args: McpArgs,
    session_id: String,
    channel: Deadline,
    /// The agent's session is created (under its parent) once, on first use.
    ensured: std::sync::Arc<OnceCell<()>>,
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

/// A failed call as the tool's result: the model reads the server's exact
/// message and can correct itself; the process carries on.
#[allow(clippy::unnecessary_wraps)]
fn tool_error(status: &tonic::Status) -> Result<CallToolResult, McpError> {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        status.message().to_owned(),
    )]))
}

fn step_status(s: &str) -> i32 {
    match s {
        "pending" => pb::StepStatus::Pending.into(),
        "in_progress" => pb::StepStatus::InProgress.into(),
        "completed" => pb::StepStatus::Completed.into(),
        // The server rejects it with a field error the model can read.
        _ => pb::StepStatus::Unspecified.into(),
    }
}

/// The seed's name of a step status.
pub(crate) fn step_status_name(s: pb::StepStatus) -> &'static str {
    match s {
        pb::StepStatus::Pending => "pending",
        pb::StepStatus::InProgress => "in_progress",
        pb::StepStatus::Completed => "completed",
        pb::StepStatus::Unspecified => "unspecified",
    }
}

/// A timestamp as the seed's ISO-8601 text (`null` when unset).
pub(crate) fn timestamp_json(t: Option<&prost_types::Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(micros(Some(t)))))
}

/// A todo list as `todo_read` shows it: ids, content, statuses,
/// priorities and ISO-8601 `created_at` / `updated_at`.
pub(crate) fn todo_json(list: &pb::TodoList) -> Value {
    let todos: Vec<Value> = list
        .todos
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "content": t.content,
                "status": match t.status() {
                    pb::TodoStatus::Pending => "pending",
                    pb::TodoStatus::InProgress => "in_progress",
                    pb::TodoStatus::Completed => "completed",
                    pb::TodoStatus::Unspecified => "unspecified",
                },
                "priority": match t.priority() {
                    pb::Priority::High => "high",
                    pb::Priority::Low => "low",
                    pb::Priority::Medium | pb::Priority::Unspecified => "medium",
                },
                "created_at": timestamp_json(t.create_time.as_ref()),
                "updated_at": timestamp_json(t.update_time.as_ref()),
            })
        })
        .collect();
    json!({ "todos": todos })
}

fn plan_json(p: &pb::ImplementationPlan) -> Value {
    json!({
        "summary": p.summary,
        "approach": p.approach,
        "alternatives_considered": p.alternatives_considered,
        "steps": p.steps.iter().map(|s| json!({
            "id": s.id,
            "description": s.description,
            "files": s.files,
            "depends_on": s.depends_on,
            "verification": s.verification,
        })).collect::<Vec<_>>(),
        "risks": p.risks,
        "files_to_create": p.files_to_create,
        "files_to_modify": p.files_to_modify,
        "tests_to_write": p.tests_to_write,
        "estimated_complexity": match p.estimated_complexity() {
            pb::Complexity::Small => "small",
            pb::Complexity::Medium => "medium",
            pb::Complexity::Large => "large",
            pb::Complexity::Unspecified => "",
        },
    })
}

/// `plan_status`'s shape: mode, goal, pending plan, active progress.
fn status_json(s: &pb::PlanStatus) -> Value {
    let mode = match s.mode() {
        pb::PlanMode::Planning => "planning",
        pb::PlanMode::AwaitingApproval => "awaiting_approval",
        pb::PlanMode::Normal | pb::PlanMode::Unspecified => "normal",
    };
    let active = s.active.as_ref().map(|a| {
        let current = a.plan.as_ref().and_then(|p| p.steps.iter().find(|st| st.id == a.current_step_id));
        json!({
            "plan_id": a.plan_id,
            "approver": a.approver,
            "progress": { "completed": a.completed_count, "total": a.total_count },
            "completed_step_ids": a.completed_step_ids,
            "current_step": current.map(|st| json!({ "id": st.id, "description": st.description, "verification": st.verification })),
            "plan": a.plan.as_ref().map(plan_json),
        })
    });
    json!({
        "mode": mode,
        "goal": s.goal,
        "scope": s.scope,
        "pending_plan": s.pending.as_ref().map(|p| json!({
            "plan_id": p.plan_id,
            "plan": p.plan.as_ref().map(plan_json),
        })),
        "active_plan": active,
        "pending_modifications": s.pending_modifications.iter().map(|m| json!({
            "modification_id": m.modification_id,
            "step_id": m.step_id,
            "reason": m.reason,
            "new_description": m.new_description,
        })).collect::<Vec<_>>(),
    })
}

#[tool_router]
impl CairnTools {
    /// The server for one agent, over a (lazily connecting) channel.
    pub fn new(args: McpArgs, channel: Channel) -> Self {
        let args_timeout = args.call_timeout;
        let session_id = args
            .session_id
            .clone()
            .unwrap_or_else(|| args.agent_id.clone());
        CairnTools {
            args,
            session_id,
            channel: Deadline::new(channel, args_timeout),
            ensured: std::sync::Arc::new(OnceCell::new()),
            tool_router: Self::tool_router(),
        }
    }

    fn plans(&self) -> pb::plan_service_client::PlanServiceClient<Deadline> {
        pb::plan_service_client::PlanServiceClient::new(self.channel.clone())
    }

    fn todos(&self) -> pb::todo_service_client::TodoServiceClient<Deadline> {
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
                    Ok(_) => Ok(()),
                    Err(e) if e.code() == tonic::Code::AlreadyExists => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .await
            .copied()
    }

    #[tool(
        name = "update_plan",
        description = "Update the task plan: the whole ordered list of steps, each pending, in_progress or completed. At most one step can be in_progress at a time; statuses may skip ahead or go back. Use it for complex work (4+ distinct steps); for simpler tasks it answers with a hint to just do the work. Explain in `explanation` why the plan changes."
    )]
    async fn update_plan(
        &self,
        Parameters(args): Parameters<UpdatePlanArgs>,
    ) -> Result<CallToolResult, McpError> {
        if let Err(e) = self.ensure_session().await {
            return tool_error(&e);
        }
        let req = pb::UpdatePlanRequest {
            session_id: self.session_id.clone(),
            explanation: args.explanation.unwrap_or_default(),
            plan: args
                .plan
                .iter()
                .map(|p| pb::PlanItem {
                    id: 0,
                    step: p.step.clone(),
                    status: step_status(&p.status),
                })
                .collect(),
            expected_revision: None,
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
                    "plan": r.plan.iter().map(|i| json!({ "step": i.step, "status": step_status_name(i.status()) })).collect::<Vec<_>>(),
                }))
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "todo_read",
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
            Ok(r) => ok_json(&todo_json(&r.into_inner().list.unwrap_or_default())),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "todo_write",
        description = "Replace your whole todo list (a full replace, not a patch). Only one item may be in_progress. Items you leave out are kept and marked completed; if every item you write is completed, the list starts clean. Use it only for genuinely complex work (3+ distinct steps) and mark items completed as soon as they are done."
    )]
    async fn todo_write(
        &self,
        Parameters(args): Parameters<TodoWriteArgs>,
    ) -> Result<CallToolResult, McpError> {
        let req = pb::WriteTodosRequest {
            agent_id: self.args.agent_id.clone(),
            todos: args
                .todos
                .iter()
                .map(|t| pb::TodoItem {
                    id: t.id.clone(),
                    content: t.content.clone(),
                    status: match t.status.as_str() {
                        "pending" => pb::TodoStatus::Pending.into(),
                        "in_progress" => pb::TodoStatus::InProgress.into(),
                        "completed" => pb::TodoStatus::Completed.into(),
                        _ => pb::TodoStatus::Unspecified.into(),
                    },
                    priority: match t.priority.as_deref() {
                        Some("high") => pb::Priority::High.into(),
                        Some("low") => pb::Priority::Low.into(),
                        Some("medium") => pb::Priority::Medium.into(),
                        // Unknown priorities are refused by the server, not guessed.
                        Some(_) => 99,
                        None => pb::Priority::Unspecified.into(),
                    },
                    ..pb::TodoItem::default()
                })
                .collect(),
            expected_revision: None,
        };
        match self.todos().write_todos(req).await {
            Ok(r) => ok_json(&todo_json(&r.into_inner().list.unwrap_or_default())),
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "plan_enter",
        description = "Enter plan mode for complex work (building a feature, refactoring, multi-file changes): write tools (write_file, cron create/delete) are blocked until your plan is approved. Explore with read-only tools, then call plan_exit with the plan. Skip plan mode for simple tasks."
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
            estimated_complexity: match p.estimated_complexity.as_deref() {
                Some("small") => pb::Complexity::Small.into(),
                Some("medium") => pb::Complexity::Medium.into(),
                Some("large") => pb::Complexity::Large.into(),
                _ => pb::Complexity::Unspecified.into(),
            },
        };
        let req = pb::ExitPlanModeRequest {
            session_id: self.session_id.clone(),
            plan: Some(plan),
            expected_revision: None,
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
        description = "Wait until your sub-agents have completed their plans (every session under yours, or the given session ids), or until the timeout. Returns whether they finished and each plan's progress."
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
        };
        let mut client = pb::watch_service_client::WatchServiceClient::new(self.channel.clone());
        let mut req = tonic::Request::new(req);
        req.extensions_mut().insert(CallTimeout(
            Duration::from_secs(seconds) + self.args.call_timeout,
        ));
        match client.wait(req).await {
            Ok(r) => {
                let r = r.into_inner();
                ok_json(&json!({
                    "satisfied": r.satisfied,
                    "sessions": r.plans.iter().map(|p| {
                        let done = p.items.iter().filter(|i| i.status() == pb::StepStatus::Completed).count();
                        let current = p.items.iter().find(|i| i.status() == pb::StepStatus::InProgress);
                        json!({
                            "session_id": p.session_id,
                            "completed": done,
                            "total": p.items.len(),
                            "current_step": current.map(|i| i.step.clone()),
                        })
                    }).collect::<Vec<_>>(),
                }))
            }
            Err(e) => tool_error(&e),
        }
    }

    #[tool(
        name = "check_action",
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
            Ok(status) => ok_json(&status_json(&status.unwrap_or_else(|| pb::PlanStatus {
                session_id: self.session_id.clone(),
                ..pb::PlanStatus::default()
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
                 For complex work, keep a plan with update_plan (one step in_progress at a time), \
                 or use plan mode (plan_enter, plan_exit, then wait for approval) before writing. \
                 Track multi-step work with todo_write.",
            )
    }
}
