//! Presenting and parsing, shared by the CLI and the MCP tools: one rule
//! per behaviour, so the two surfaces never disagree.
//!
//! - names of statuses, priorities, modes and complexities as people and
//!   agents write them (`in_progress`, `high`…) and back;
//! - timestamps as ISO-8601 text;
//! - a todo list as `todo_read` shows it;
//! - a plan's progress (done, total, the current step).

use cairn_api as pb;
use prost_types::Timestamp;
use rmcp::schemars;
use serde::Deserialize;
use serde_json::{Value, json};

/// One checklist step as agents and people write it.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
pub struct PlanStepArg {
    /// What to do: specific and verifiable.
    pub step: String,
    /// "pending", "in_progress" or "completed".
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
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(pb::UpdatePlanRequest {
            session_id,
            explanation: self.explanation.unwrap_or_default(),
            plan,
            expected_revision: None,
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
    /// "pending", "in_progress" or "completed".
    pub status: String,
    /// "high", "medium" or "low" (default medium).
    #[serde(default)]
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

/// The name of a checklist status.
pub fn step_status_name(s: pb::StepStatus) -> &'static str {
    match s {
        pb::StepStatus::Pending => "pending",
        pb::StepStatus::InProgress => "in_progress",
        pb::StepStatus::Completed => "completed",
        pb::StepStatus::Unspecified => "unspecified",
    }
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

/// The name of a todo status.
pub fn todo_status_name(s: pb::TodoStatus) -> &'static str {
    match s {
        pb::TodoStatus::Pending => "pending",
        pb::TodoStatus::InProgress => "in_progress",
        pb::TodoStatus::Completed => "completed",
        pb::TodoStatus::Unspecified => "unspecified",
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

/// The name of a priority; the server stores an unset one as medium.
pub fn priority_name(p: pb::Priority) -> &'static str {
    match p {
        pb::Priority::High => "high",
        pb::Priority::Low => "low",
        pb::Priority::Medium | pb::Priority::Unspecified => "medium",
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

/// The name of a complexity estimate (empty when unset).
pub fn complexity_name(c: pb::Complexity) -> &'static str {
    match c {
        pb::Complexity::Small => "small",
        pb::Complexity::Medium => "medium",
        pb::Complexity::Large => "large",
        pb::Complexity::Unspecified => "",
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

/// The name of a role.
pub fn role_name(r: pb::Role) -> &'static str {
    match r {
        pb::Role::Admin => "admin",
        pb::Role::Orchestrator => "orchestrator",
        pb::Role::Agent => "agent",
        pb::Role::Approver => "approver",
        pb::Role::Viewer => "viewer",
        pb::Role::Unspecified => "unspecified",
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

/// The name of a plan mode, as agents read it (`awaiting_approval`).
pub fn mode_name(m: pb::PlanMode) -> &'static str {
    match m {
        pb::PlanMode::Planning => "planning",
        pb::PlanMode::AwaitingApproval => "awaiting_approval",
        pb::PlanMode::Normal | pb::PlanMode::Unspecified => "normal",
    }
}

/// A plan mode as people read it (`awaiting approval`).
pub fn mode_label(m: pb::PlanMode) -> String {
    mode_name(m).replace('_', " ")
}

fn unknown(field: &str, value: &str, known: &str) -> String {
    let value: String = value.chars().take(40).collect();
    format!("{field}: {value:?} is not one of {known}")
}

/// Microseconds since the epoch; unset is 0.
pub fn micros(t: Option<&Timestamp>) -> i64 {
    t.map_or(0, |t| {
        t.seconds
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(t.nanos / 1000))
    })
}

/// Now, in microseconds since the epoch (the client's clock).
pub fn now_micros() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// ISO-8601 / RFC 3339 UTC text to the millisecond, as `todo_read`'s
/// `created_at` shows it.
pub fn rfc3339(t: &Timestamp) -> String {
    cairn_core::rfc3339(micros(Some(t)))
}

/// A timestamp as JSON: ISO-8601 text, or `null` when unset.
pub fn timestamp_json(t: Option<&Timestamp>) -> Value {
    t.map_or(Value::Null, |t| Value::String(rfc3339(t)))
}

/// A todo list as `todo_read` shows it: ids, content, statuses,
/// priorities and ISO-8601 `created_at` / `updated_at`.
pub fn todo_json(list: &pb::TodoList) -> Value {
    let todos: Vec<Value> = list
        .todos
        .iter()
        .map(|t| {
            json!({
                "id": t.id,
                "content": t.content,
                "status": todo_status_name(t.status()),
                "priority": priority_name(t.priority()),
                "created_at": timestamp_json(t.create_time.as_ref()),
                "updated_at": timestamp_json(t.update_time.as_ref()),
            })
        })
        .collect();
    json!({ "todos": todos })
}

/// Where a checklist stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress<'a> {
    /// Completed items.
    pub done: usize,
    /// All items.
    pub total: usize,
    /// The in-progress item's text, if any.
    pub current: Option<&'a str>,
}

/// Where a checklist stands.
pub fn progress(items: &[pb::PlanItem]) -> Progress<'_> {
    Progress {
        done: items
            .iter()
            .filter(|i| i.status() == pb::StepStatus::Completed)
            .count(),
        total: items.len(),
        current: items
            .iter()
            .find(|i| i.status() == pb::StepStatus::InProgress)
            .map(|i| i.step.as_str()),
    }
}

/// An implementation plan, whole.
pub fn implementation_plan_json(p: &pb::ImplementationPlan) -> Value {
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
        "estimated_complexity": complexity_name(p.estimated_complexity()),
    })
}

/// Plan mode as both surfaces show it (`cairn plan status --output json`
/// and the `plan_status` tool): mode, goal, pending plan, active progress,
/// pending modifications.
pub fn plan_status_json(s: &pb::PlanStatus) -> Value {
    let mode = mode_name(s.mode());
    let active = s.active.as_ref().map(|a| {
        let current = a.plan.as_ref().and_then(|p| p.steps.iter().find(|st| st.id == a.current_step_id));
        json!({
            "plan_id": a.plan_id,
            "approver": a.approver,
            "progress": { "completed": a.completed_count, "total": a.total_count },
            "completed_step_ids": a.completed_step_ids,
            "current_step": current.map(|st| json!({ "id": st.id, "description": st.description, "verification": st.verification })),
            "plan": a.plan.as_ref().map(implementation_plan_json),
        })
    });
    json!({
        "mode": mode,
        "goal": s.goal,
        "scope": s.scope,
        "pending_plan": s.pending.as_ref().map(|p| json!({
            "plan_id": p.plan_id,
            "plan": p.plan.as_ref().map(implementation_plan_json),
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
        let t = |seconds, nanos| Timestamp { seconds, nanos };
        assert_eq!(rfc3339(&t(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339(&t(1_796_011_733, 123_456_000)),
            "2026-11-30T04:08:53.123Z"
        );
        assert_eq!(timestamp_json(None), Value::Null);
    }

    #[test]
    fn progress_of_a_checklist() {
        let item = |step: &str, s: pb::StepStatus| pb::PlanItem {
            id: 0,
            step: step.into(),
            status: s.into(),
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
