//! The JSON shapes every surface presents, built from the API's messages
//! (never from the store's records): the CLI's `--output json`, the MCP
//! tools, and the dashboard's event stream show the same things the same
//! way, because they show them through these functions.
//!
//! - names of statuses, priorities, modes, complexities and roles as people
//!   and agents write them (`in_progress`, `high`…);
//! - timestamps as ISO-8601 text;
//! - a session, a plan (its checklist and plan-mode status), a todo list;
//! - a watch event ([`event_json`]), the shape `docs/dashboard.md` documents.

use prost_types::Timestamp;
use serde_json::{Value, json};

use crate as pb;

/// The name of a checklist status.
pub fn step_status_name(s: pb::StepStatus) -> &'static str {
    match s {
        pb::StepStatus::Pending => "pending",
        pb::StepStatus::InProgress => "in_progress",
        pb::StepStatus::Completed => "completed",
        pb::StepStatus::Cancelled => "cancelled",
        pb::StepStatus::Unspecified => "unspecified",
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

/// The name of a priority; the server stores an unset one as medium.
pub fn priority_name(p: pb::Priority) -> &'static str {
    match p {
        pb::Priority::High => "high",
        pb::Priority::Low => "low",
        pb::Priority::Medium | pb::Priority::Unspecified => "medium",
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

/// Microseconds since the epoch; unset is 0.
pub fn micros(t: Option<&Timestamp>) -> i64 {
    t.map_or(0, |t| {
        t.seconds
            .saturating_mul(1_000_000)
            .saturating_add(i64::from(t.nanos / 1000))
    })
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

/// A liveness state's name: `active`, `idle`, `stalled`, `lost`,
/// `finished`, or `none` for a session without a lease.
pub fn liveness_name(l: pb::Liveness) -> &'static str {
    match l {
        pb::Liveness::Unspecified => "none",
        pb::Liveness::Active => "active",
        pb::Liveness::Idle => "idle",
        pb::Liveness::Stalled => "stalled",
        pb::Liveness::Lost => "lost",
        pb::Liveness::Finished => "finished",
    }
}

fn seconds(d: Option<&prost_types::Duration>) -> f64 {
    d.map_or(0.0, |d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
}

/// A lease as JSON: its state, timings, when the state was entered and
/// the last sign of life; `null` for a session without one.
pub fn lease_json(l: Option<&pb::Lease>) -> Value {
    l.map_or(Value::Null, |l| {
        json!({
            "state": liveness_name(l.state()),
            "ttl_seconds": seconds(l.ttl.as_ref()),
            "grace_seconds": seconds(l.grace.as_ref()),
            "state_time": timestamp_json(l.state_time.as_ref()),
            "last_seen_time": timestamp_json(l.last_seen_time.as_ref()),
        })
    })
}

/// A span of seconds as the board says it: `45s`, `2m`, `3h`.
pub fn ago(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        _ => format!("{}h", secs / 3600),
    }
}

/// Whole seconds from `then` to `now` (server micros), 0 if `then` is
/// later.
pub fn secs_between(then: i64, now: i64) -> u64 {
    u64::try_from(now.saturating_sub(then).max(0) / 1_000_000).unwrap_or(0)
}

/// A lease as the surfaces show it: the state's name, and the seconds
/// since its agent's last sign of life.
pub fn liveness_of(l: &pb::Lease, now_micros: i64) -> (&'static str, u64) {
    (
        liveness_name(l.state()),
        secs_between(micros(l.last_seen_time.as_ref()), now_micros),
    )
}

/// What `Wait` found about a lost sub-agent, in words an agent acts on:
/// "Sub-agent coder (orch:coder) was lost at step 3 'Implement the login
/// API' 2m ago".
pub fn lost_sentence(l: &pb::LostSession, now_micros: i64) -> String {
    let who = if l.agent_id.is_empty() {
        format!("Sub-agent session {}", l.session_id)
    } else {
        format!("Sub-agent {} ({})", l.agent_id, l.session_id)
    };
    let at = if l.step_id == 0 && l.step.is_empty() {
        " before it made a plan".to_owned()
    } else {
        format!(" at step {} '{}'", l.step_id, l.step)
    };
    let when = match l.last_seen_time.as_ref() {
        Some(t) => format!(" {} ago", ago(secs_between(micros(Some(t)), now_micros))),
        None => String::new(),
    };
    format!(
        "{who} was lost{at}{when}: its agent stopped renewing its lease. Restart it or reassign its work."
    )
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
    /// Finished items: completed, or cancelled (observed plans).
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
            .filter(|i| {
                matches!(
                    i.status(),
                    pb::StepStatus::Completed | pb::StepStatus::Cancelled
                )
            })
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
        "pending_modifications": s.pending_modifications.iter().map(modification_json).collect::<Vec<_>>(),
        "lease": lease_json(s.lease.as_ref()),
    })
}

fn modification_json(m: &pb::PlanModification) -> Value {
    json!({
        "modification_id": m.modification_id,
        "step_id": m.step_id,
        "reason": m.reason,
        "new_description": m.new_description,
    })
}

/// An inbox item's kind: `plan` or `modification`.
pub fn inbox_kind_name(k: pb::InboxItemKind) -> &'static str {
    match k {
        pb::InboxItemKind::Modification => "modification",
        pb::InboxItemKind::Plan | pb::InboxItemKind::Unspecified => "plan",
    }
}

/// An inbox item as every surface shows it, with how long it has waited
/// at `now` (micros).
pub fn inbox_item_json(i: &pb::InboxItem, now: i64) -> Value {
    json!({
        "session_id": i.session_id,
        "agent_id": i.agent_id,
        "parent_session_id": i.parent_session_id,
        "kind": inbox_kind_name(i.kind()),
        "plan_id": i.plan_id,
        "goal": i.goal,
        "summary": i.summary,
        "modification": i.modification.as_ref().map(modification_json),
        "submitted_by": i.submitted_by,
        "waiting_since": timestamp_json(i.waiting_since.as_ref()),
        "waiting_seconds": secs_between(micros(i.waiting_since.as_ref()), now),
        "deadline": i.deadline.as_ref().map(|d| deadline_json(d, now)),
    })
}

fn policy_name(p: pb::DeadlinePolicy) -> &'static str {
    match p {
        pb::DeadlinePolicy::Unspecified | pb::DeadlinePolicy::Wait => "wait",
        pb::DeadlinePolicy::Reject => "reject",
        pb::DeadlinePolicy::Escalate => "escalate",
    }
}

/// An approval deadline as every surface shows it, with a sentence for
/// people (`deadline_text`).
pub fn deadline_json(d: &pb::Deadline, now: i64) -> Value {
    json!({
        "deadline_time": timestamp_json(d.deadline_time.as_ref()),
        "policy": policy_name(d.policy()),
        "escalate_to": d.escalate_to,
        "escalated_to": d.escalated_to,
        "text": deadline_text(d, now),
    })
}

/// One line on an approval deadline at `now`: "rejected in 5m",
/// "escalated to lead in 1h", prefixed by "escalated to X;" once it was.
pub fn deadline_text(d: &pb::Deadline, now: i64) -> String {
    let at = micros(d.deadline_time.as_ref());
    let to = &d.escalate_to;
    let then = if at >= now {
        let left = ago(secs_between(now, at));
        match d.policy() {
            pb::DeadlinePolicy::Reject => format!("rejected in {left}"),
            pb::DeadlinePolicy::Escalate => format!("escalated to {to} in {left}"),
            pb::DeadlinePolicy::Unspecified | pb::DeadlinePolicy::Wait => format!("due in {left}"),
        }
    } else {
        let late = ago(secs_between(at, now));
        match d.policy() {
            pb::DeadlinePolicy::Reject => format!("rejection {late} overdue"),
            pb::DeadlinePolicy::Escalate => format!("escalation to {to} {late} overdue"),
            pb::DeadlinePolicy::Unspecified | pb::DeadlinePolicy::Wait => format!("{late} overdue"),
        }
    };
    if d.escalated_to.is_empty() {
        then
    } else {
        format!("escalated to {}; {then}", d.escalated_to)
    }
}

/// A session as every surface shows it.
pub fn session_json(s: &pb::Session) -> Value {
    json!({
        "session_id": s.session_id,
        "agent_id": s.agent_id,
        "parent_session_id": s.parent_session_id,
        "title": s.title,
        "labels": s.labels,
        "create_time": timestamp_json(s.create_time.as_ref()),
        "update_time": timestamp_json(s.update_time.as_ref()),
        "revision": s.revision,
        "lease": lease_json(s.lease.as_ref()),
    })
}

/// A session's plan: the checklist, the plan mode's name, and the whole
/// plan-mode status as [`plan_status_json`] shows it.
pub fn plan_json(p: &pb::Plan) -> Value {
    json!({
        "session_id": p.session_id,
        "explanation": p.explanation,
        "plan": p.items.iter().map(item_json).collect::<Vec<_>>(),
        "source": source_name(p.source()),
        "mode": p.status.as_ref().map_or("normal", |s| mode_name(s.mode())),
        "status": p.status.as_ref().map(plan_status_json),
        "revision": p.revision,
        "update_time": timestamp_json(p.update_time.as_ref()),
    })
}

/// The name of a plan's source: `tool` (Cairn's tools), or `observed` (an
/// agent's own plan, mirrored by `cairn hook`).
pub fn source_name(s: pb::PlanSource) -> &'static str {
    match s {
        pb::PlanSource::Observed => "observed",
        pb::PlanSource::Tool | pb::PlanSource::Unspecified => "tool",
    }
}

/// One checklist step: id, text, status, and what it waits for when the
/// agent said (observed plans).
pub fn item_json(i: &pb::PlanItem) -> Value {
    let mut v = json!({"id": i.id, "step": i.step, "status": step_status_name(i.status())});
    if !i.blocked_by.is_empty() {
        v["blocked_by"] = json!(i.blocked_by);
    }
    v
}

/// The name of a watch event's type (`plan_updated`).
pub fn event_type_name(t: pb::EventType) -> &'static str {
    match t {
        pb::EventType::SessionCreated => "session_created",
        pb::EventType::SessionUpdated => "session_updated",
        pb::EventType::SessionDeleted => "session_deleted",
        pb::EventType::PlanUpdated => "plan_updated",
        pb::EventType::TodosUpdated => "todos_updated",
        pb::EventType::TodosCleared => "todos_cleared",
        pb::EventType::InboxItemAdded => "inbox_item_added",
        pb::EventType::InboxItemRemoved => "inbox_item_removed",
        pb::EventType::Unspecified => "unspecified",
    }
}

/// A watch event: its revision and type, whom it concerns, and the object
/// as it is after the event (`session`, `plan` or `todos`, the others
/// `null`). The dashboard's `/events` stream sends exactly this. An inbox
/// event also has `inbox_item` (the item's shape, its wait measured at its
/// revision's time is left out: `waiting_since` says it).
pub fn event_json(e: &pb::Event) -> Value {
    let (session, plan, todos) = match &e.object {
        Some(pb::event::Object::Session(s)) => (session_json(s), Value::Null, Value::Null),
        Some(pb::event::Object::Plan(p)) => (Value::Null, plan_json(p), Value::Null),
        Some(pb::event::Object::Todos(t)) => (Value::Null, Value::Null, todo_json(t)),
        Some(pb::event::Object::InboxItem(i)) => {
            let mut item = inbox_item_json(i, micros(i.waiting_since.as_ref()));
            if let Some(o) = item.as_object_mut() {
                o.remove("waiting_seconds");
            }
            return json!({
                "revision": e.revision,
                "type": event_type_name(e.r#type()),
                "session_id": e.session_id,
                "parent_session_id": e.parent_session_id,
                "agent_id": e.agent_id,
                "inbox_item": item,
            });
        }
        None => (Value::Null, Value::Null, Value::Null),
    };
    json!({
        "revision": e.revision,
        "type": event_type_name(e.r#type()),
        "session_id": e.session_id,
        "parent_session_id": e.parent_session_id,
        "agent_id": e.agent_id,
        "session": session,
        "plan": plan,
        "todos": todos,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event shape docs/dashboard.md documents: these keys, these
    /// names, the object under the key of its kind.
    #[test]
    fn an_event_has_the_documented_shape() {
        let e = pb::Event {
            revision: 7,
            r#type: pb::EventType::PlanUpdated.into(),
            session_id: "orch:coder".into(),
            parent_session_id: "orch".into(),
            agent_id: "coder".into(),
            object: Some(pb::event::Object::Plan(pb::Plan {
                session_id: "orch:coder".into(),
                items: vec![pb::PlanItem {
                    id: 1,
                    step: "Write the API".into(),
                    status: pb::StepStatus::InProgress.into(),
                    blocked_by: Vec::new(),
                }],
                ..pb::Plan::default()
            })),
            ..pb::Event::default()
        };
        let v = event_json(&e);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "agent_id",
                "parent_session_id",
                "plan",
                "revision",
                "session",
                "session_id",
                "todos",
                "type"
            ]
        );
        assert_eq!(v["type"], "plan_updated");
        assert_eq!(v["plan"]["plan"][0]["status"], "in_progress");
        assert_eq!(v["plan"]["mode"], "normal");
        assert!(v["session"].is_null() && v["todos"].is_null());
    }
}
