//! The tools' arguments: each tool's JSON schema comes from these types
//! and their doc comments, which the model reads.

use std::time::Duration;

use cairn_core::duration::parse_duration;
use rmcp::schemars;
use serde::Deserialize;

use crate::conn::ServerArgs;
pub use crate::view::{TodoArg, UpdatePlanArgs};

/// `cairn mcp` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// The Cairn server to talk to, and the agent's token for it.
    #[command(flatten)]
    pub server: ServerArgs,
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
    #[arg(long, env = "CAIRN_CALL_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub call_timeout: Duration,
    /// TTL of the session's lease, renewed every third of it while this
    /// process runs (the server's --lease-ttl when unset).
    #[arg(long, env = "CAIRN_LEASE_TTL", value_parser = parse_duration)]
    pub lease_ttl: Option<Duration>,
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
    #[schemars(range(min = 1))]
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
    /// How big the work is.
    #[serde(default)]
    #[schemars(extend("enum" = ["small", "medium", "large", null]))]
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
    #[schemars(range(min = 1))]
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
    #[schemars(range(min = 1))]
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

/// Arguments of `inbox_decide`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct InboxDecideArgs {
    /// The session whose plan or modification to decide on (from `inbox`).
    pub session_id: String,
    /// The modification to decide on; leave it out to decide on the plan.
    #[serde(default)]
    pub modification_id: Option<u32>,
    /// `approve` or `reject`.
    #[schemars(extend("enum" = ["approve", "reject"]))]
    pub decision: String,
    /// Why (shown to the agent that asked, on a rejection).
    #[serde(default)]
    pub reason: Option<String>,
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
