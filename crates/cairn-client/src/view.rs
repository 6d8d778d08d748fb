//! Presenting and parsing, shared by the CLI and the MCP tools: one rule
//! per behaviour, so the two surfaces never disagree.
//!
//! - names of statuses, priorities, modes and complexities as people and
//!   agents write them (`in_progress`, `high`…) and back;
//! - timestamps as ISO-8601 text;
//! - a todo list as `todo_read` shows it;
//! - a plan's progress (done, total, the current step).

use cairn_api as pb;
use rmcp::schemars;
use serde::Deserialize;

/// The output shapes live with the API, so that the dashboard (which may
/// not import a client) presents through them too.
pub use cairn_api::shapes::*;

/// One checklist step as agents and people write it.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct PlanStepArg {
    /// What to do: specific and verifiable.
    pub step: String,
    /// Where the step stands.
    #[schemars(extend("enum" = ["pending", "in_progress", "completed"]))]
    pub status: String,
}

/// A whole checklist: `update_plan`'s arguments, and `cairn plan update`'s
/// JSON.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct UpdatePlanArgs {
    /// Why the plan changes now.
    #[serde(default)]
    pub explanation: Option<String>,
    /// The whole plan, in order.
    pub plan: Vec<PlanStepArg>,
}

impl UpdatePlanArgs {
    /// The request for `session_id`.
    pub fn request(self, session_id: String) -> Result<pb::UpdatePlanRequest, String> {
        let plan = self
            .plan
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                Ok(pb::PlanItem {
                    id: 0,
                    status: parse_step_status(&format!("plan[{i}].status"), &s.status)?.into(),
                    step: s.step,
                    blocked_by: Vec::new(),
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(pb::UpdatePlanRequest {
            session_id,
            explanation: self.explanation.unwrap_or_default(),
            plan,
            expected_revision: None,
            source: pb::PlanSource::Tool.into(),
        })
    }
}

/// One todo as agents and people write it: `todo_write`'s items, and
/// `cairn todo write`'s JSON.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct TodoArg {
    /// Unique id within the list.
    pub id: String,
    /// What to do.
    pub content: String,
    /// Where the item stands.
    #[schemars(extend("enum" = ["pending", "in_progress", "completed"]))]
    pub status: String,
    /// How urgent it is (default medium).
    #[serde(default)]
    #[schemars(extend("enum" = ["high", "medium", "low", null]))]
    pub priority: Option<String>,
}

/// Todos as the API takes them.
pub fn todo_items(args: Vec<TodoArg>) -> Result<Vec<pb::TodoItem>, String> {
    args.into_iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(pb::TodoItem {
                status: parse_todo_status(&format!("todos[{i}].status"), &t.status)?.into(),
                priority: parse_priority(&format!("todos[{i}].priority"), t.priority.as_deref())?
                    .into(),
                id: t.id,
                content: t.content,
                ..pb::TodoItem::default()
            })
        })
        .collect()
}

/// A checklist status from its name.
pub fn parse_step_status(field: &str, name: &str) -> Result<pb::StepStatus, String> {
    match name {
        "pending" => Ok(pb::StepStatus::Pending),
        "in_progress" => Ok(pb::StepStatus::InProgress),
        "completed" => Ok(pb::StepStatus::Completed),
        other => Err(unknown(field, other, "pending, in_progress or completed")),
    }
}

/// A todo status from its name.
pub fn parse_todo_status(field: &str, name: &str) -> Result<pb::TodoStatus, String> {
    match name {
        "pending" => Ok(pb::TodoStatus::Pending),
        "in_progress" => Ok(pb::TodoStatus::InProgress),
        "completed" => Ok(pb::TodoStatus::Completed),
        other => Err(unknown(field, other, "pending, in_progress or completed")),
    }
}

/// A priority from its name; none given is medium, the default.
pub fn parse_priority(field: &str, name: Option<&str>) -> Result<pb::Priority, String> {
    match name {
        None | Some("medium") => Ok(pb::Priority::Medium),
        Some("high") => Ok(pb::Priority::High),
        Some("low") => Ok(pb::Priority::Low),
        Some(other) => Err(unknown(field, other, "high, medium or low")),
    }
}

/// A complexity estimate from its name; none given is unset.
pub fn parse_complexity(field: &str, name: Option<&str>) -> Result<pb::Complexity, String> {
    match name {
        None | Some("") => Ok(pb::Complexity::Unspecified),
        Some("small") => Ok(pb::Complexity::Small),
        Some("medium") => Ok(pb::Complexity::Medium),
        Some("large") => Ok(pb::Complexity::Large),
        Some(other) => Err(unknown(field, other, "small, medium or large")),
    }
}

/// A role from its name.
pub fn parse_role(field: &str, name: &str) -> Result<pb::Role, String> {
    match name {
        "admin" => Ok(pb::Role::Admin),
        "orchestrator" => Ok(pb::Role::Orchestrator),
        "agent" => Ok(pb::Role::Agent),
        "approver" => Ok(pb::Role::Approver),
        "viewer" => Ok(pb::Role::Viewer),
        other => Err(unknown(
            field,
            other,
            "admin, orchestrator, agent, approver or viewer",
        )),
    }
}

fn unknown(field: &str, value: &str, known: &str) -> String {
    let value: String = value.chars().take(40).collect();
    format!("{field}: {value:?} is not one of {known}")
}

/// A decision on an item awaiting approval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Approve, recording this approver (ignored with authentication on:
    /// the server records the caller).
    Approve { approver: String },
    /// Reject, telling the agent why (a plan; a modification's rejection
    /// carries no reason).
    Reject { reason: String },
}

/// Decides on the plan awaiting approval in `session_id`, or with
/// `modification_id` on that modification: the `cairn inbox` list and the
/// MCP `inbox_decide` tool both go through here. The plan status after it.
pub async fn decide(
    plans: &mut pb::plan_service_client::PlanServiceClient<crate::conn::Api>,
    session_id: String,
    modification_id: Option<u32>,
    verdict: Verdict,
) -> Result<Option<pb::PlanStatus>, tonic::Status> {
    let expected_revision = None;
    match (modification_id, verdict) {
        (None, Verdict::Approve { approver }) => plans
            .approve_plan(pb::ApprovePlanRequest {
                session_id,
                approver,
                expected_revision,
            })
            .await
            .map(|r| r.into_inner().status),
        (None, Verdict::Reject { reason }) => plans
            .reject_plan(pb::RejectPlanRequest {
                session_id,
                reason,
                expected_revision,
            })
            .await
            .map(|r| r.into_inner().status),
        (Some(modification_id), Verdict::Approve { .. }) => plans
            .approve_modification(pb::ApproveModificationRequest {
                session_id,
                modification_id,
                expected_revision,
            })
            .await
            .map(|r| r.into_inner().status),
        (Some(modification_id), Verdict::Reject { .. }) => plans
            .reject_modification(pb::RejectModificationRequest {
                session_id,
                modification_id,
                expected_revision,
            })
            .await
            .map(|r| r.into_inner().status),
    }
}

/// Now, in microseconds since the epoch (the client's clock).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for s in [
            pb::StepStatus::Pending,
            pb::StepStatus::InProgress,
            pb::StepStatus::Completed,
        ] {
            assert_eq!(parse_step_status("s", step_status_name(s)), Ok(s));
        }
        for s in [
            pb::TodoStatus::Pending,
            pb::TodoStatus::InProgress,
            pb::TodoStatus::Completed,
        ] {
            assert_eq!(parse_todo_status("s", todo_status_name(s)), Ok(s));
        }
        for p in [pb::Priority::High, pb::Priority::Medium, pb::Priority::Low] {
            assert_eq!(parse_priority("p", Some(priority_name(p))), Ok(p));
        }
        // One rule for a missing priority, on every surface.
        assert_eq!(parse_priority("p", None), Ok(pb::Priority::Medium));
        assert_eq!(
            parse_priority("todos[0].priority", Some("urgent")),
            Err("todos[0].priority: \"urgent\" is not one of high, medium or low".into())
        );
        assert_eq!(
            parse_complexity("c", Some("large")),
            Ok(pb::Complexity::Large)
        );
        assert!(parse_complexity("c", Some("huge")).is_err());
        assert_eq!(
            mode_label(pb::PlanMode::AwaitingApproval),
            "awaiting approval"
        );
    }

    #[test]
    fn timestamps_as_text() {
        let t = |seconds, nanos| prost_types::Timestamp { seconds, nanos };
        assert_eq!(rfc3339(&t(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(&t(1_796_011_733, 123_456_000)),
            "2026-11-30T04:08:53.123Z"
        );
        assert_eq!(timestamp_json(None), serde_json::Value::Null);
    }

    #[test]
    fn progress_of_a_checklist() {
        let item = |step: &str, s: pb::StepStatus| pb::PlanItem {
            id: 0,
            step: step.into(),
            status: s.into(),
            blocked_by: Vec::new(),
        };
        let items = [
            item("a", pb::StepStatus::Completed),
            item("b", pb::StepStatus::InProgress),
            item("c", pb::StepStatus::Pending),
        ];
        assert_eq!(
            progress(&items),
            Progress {
                done: 1,
                total: 3,
                current: Some("b")
            }
        );
    }
}
