//! Request builders the tests share.

use cairn_api as pb;

pub fn item(step: &str, status: pb::StepStatus) -> pb::PlanItem {
    pb::PlanItem {
        id: 0,
        step: step.into(),
        status: status.into(),
        blocked_by: Vec::new(),
    }
}

/// A five-step plan (the example of docs/rules.md), one in progress.
pub fn five_steps() -> Vec<pb::PlanItem> {
    use pb::StepStatus::{Completed, InProgress, Pending};
    vec![
        item("Design the database schema", Completed),
        item("Implement the sign-up API", InProgress),
        item("Implement the login API", Pending),
        item("Add password hashing", Pending),
        item("Write unit tests", Pending),
    ]
}

pub fn update(session: &str, items: Vec<pb::PlanItem>) -> pb::UpdatePlanRequest {
    pb::UpdatePlanRequest {
        session_id: session.into(),
        explanation: "Implement user authentication".into(),
        plan: items,
        expected_revision: None,
        source: pb::PlanSource::Unspecified.into(),
    }
}

pub fn session(id: &str, parent: &str) -> pb::CreateSessionRequest {
    pb::CreateSessionRequest {
        session: Some(pb::Session {
            session_id: id.into(),
            parent_session_id: parent.into(),
            agent_id: format!("agent-{id}"),
            title: format!("session {id}"),
            ..pb::Session::default()
        }),
    }
}

pub fn todo(id: &str, status: pb::TodoStatus) -> pb::TodoItem {
    pb::TodoItem {
        id: id.into(),
        content: format!("do {id}"),
        status: status.into(),
        priority: pb::Priority::Medium.into(),
        ..pb::TodoItem::default()
    }
}
